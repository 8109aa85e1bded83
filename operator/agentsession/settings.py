"""How every program reads its settings: a flag wins over an environment variable, which wins over the default.

Each program's settings are one pydantic-settings class. The library parses the command line itself, so `--help`
lists every field with its description, and a field `foo_bar` is both `--foo-bar` and `<PREFIX>FOO_BAR`.
A list is comma separated or a JSON list, in a variable as in a flag; a repeated flag adds to it. An on/off
setting is `--foo` or `--no-foo` on the command line, `true` or `false` in a variable. A variable set to the empty
string counts as unset.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BeforeValidator, Field, ValidationError
from pydantic_settings import BaseSettings, CliApp, NoDecode, SettingsConfigDict, SettingsError

S = TypeVar("S", bound=BaseSettings)


def _split(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        try:
            items = json.loads(text)
        except ValueError:
            items = None
        if isinstance(items, list):
            return items
    return [item.strip() for item in text.split(",") if item.strip()]


def _upper(value: Any) -> Any:
    return value.upper() if isinstance(value, str) else value


# NoDecode hands the raw text to `_split` instead of requiring JSON, so `a,b` works wherever `["a","b"]` does.
StrList = Annotated[list[str], NoDecode, BeforeValidator(_split)]
IntList = Annotated[list[int], NoDecode, BeforeValidator(_split)]
LogLevel = Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], BeforeValidator(_upper)]
LogFormat = Literal["text", "json"]


class WatchingSettings(BaseSettings):
    """The settings of a program that keeps watches of the API server open (the gateway, the egress proxy)."""

    watch_inactivity_timeout: float = Field(
        default=60.0,
        gt=0,
        description="Seconds a watch may send nothing, not even a bookmark, before it is reopened.",
    )
    watch_server_timeout: int = Field(
        default=300, ge=1, description="Seconds the API server keeps each watch open before it is renewed."
    )


def settings_config(
    prog: str,
    env_prefix: str,
    *,
    cli_shortcuts: Mapping[str, str] | None = None,
    env_nested_delimiter: str | None = None,
) -> SettingsConfigDict:
    """`cli_shortcuts` maps a flag (`token-audiences`) to another name it keeps answering to (`token-audience`)."""
    return SettingsConfigDict(
        env_prefix=env_prefix,
        env_nested_delimiter=env_nested_delimiter,
        # Manifests and shell scripts often pass a variable that is set but empty; that means "use the default".
        env_ignore_empty=True,
        cli_prog_name=prog,
        cli_kebab_case=True,
        cli_implicit_flags=True,
        cli_hide_none_type=True,
        cli_shortcuts=cli_shortcuts,
    )


def env_name(cls: type[BaseSettings], field: str) -> str:
    return f"{cls.model_config.get('env_prefix', '')}{field}".upper()


def flag_names(cls: type[BaseSettings], field: str) -> list[str]:
    flag = field.replace("_", "-")
    names = [f"--{flag}"]
    if cls.model_fields[field].annotation is bool:
        names.append(f"--no-{flag}")
    shortcut = (cls.model_config.get("cli_shortcuts") or {}).get(flag)
    if isinstance(shortcut, str):
        names.append(f"--{shortcut}")
    return names


def _reasons(cls: type[BaseSettings], error: ValidationError) -> str:
    reasons = []
    for detail in error.errors(include_url=False):
        field = str(detail["loc"][0]) if detail["loc"] else ""
        where = f"{flag_names(cls, field)[0]} / {env_name(cls, field)}: " if field in cls.model_fields else ""
        reasons.append(where + detail["msg"])
    return "; ".join(reasons)


def load(cls: type[S], argv: Sequence[str] | None = None) -> S:
    """The settings from `argv` (default: this process's arguments) over the environment.

    A value that does not fit exits with status 2 and says which setting, the way argparse reports a bad flag."""
    try:
        return CliApp.run(cls, cli_args=list(sys.argv[1:] if argv is None else argv))
    except ValidationError as error:
        reason = _reasons(cls, error)
    except SettingsError as error:
        reason = str(error)
    print(f"{cls.model_config.get('cli_prog_name')}: error: {reason}", file=sys.stderr)
    raise SystemExit(2)
