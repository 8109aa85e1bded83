"""The three programs' settings: each one by flag and by variable, flags over variables, and the doc's tables."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from pydantic_settings import BaseSettings

from agentsession.agentctl.config import AgentctlSettings, ConfigError, parse_config
from agentsession.api.egress import Budget
from agentsession.api.models import CABundleSource
from agentsession.contract.wire import TOKEN_ENV
from agentsession.controller.config import (
    AgentctlNetworkPolicy,
    AgentProfile,
    EgressProxy,
    OperatorConfig,
    Resources,
)
from agentsession.gateway.config import GatewayConfig, parse_args
from agentsession.settings import env_name, flag_names, load

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
PROGRAMS: dict[str, type[BaseSettings]] = {
    "agentsession-operator": OperatorConfig,
    "agentsession-gateway": GatewayConfig,
    "agentctl": AgentctlSettings,
}
BUILT_IN_PROFILES = OperatorConfig.model_fields["agent_profiles"].get_default(call_default_factory=True)

# For every setting: its text (as a variable or a flag's value) and the value it must become. A new setting fails
# `test_every_setting_has_a_sample` until it is added here, and so is tested both ways.
SAMPLES: dict[type[BaseSettings], dict[str, tuple[str, Any]]] = {
    OperatorConfig: {
        "namespaces": ("team-a,team-*", ["team-a", "team-*"]),
        "image": ("registry.example/agentsession:1", "registry.example/agentsession:1"),
        "image_pull_policy": ("Always", "Always"),
        "agentctl_port": ("9000", 9000),
        "agent_profiles": (
            '{"extra": {"command": ["extra-acp"]}}',
            {**BUILT_IN_PROFILES, "extra": AgentProfile(command=["extra-acp"])},
        ),
        "agentctl_resources": ('{"requests": {"cpu": "1"}}', Resources(requests={"cpu": "1"})),
        "agent_resources": ('{"limits": {"memory": "1Gi"}}', Resources(limits={"memory": "1Gi"})),
        "git_image": ("git:1", "git:1"),
        "ca_bundle": ('{"configMapName": "cas"}', CABundleSource(configMapName="cas")),
        "run_as_user": ("1000", 1000),
        "agentctl_run_as_user": ("1001", 1001),
        "agentctl_images": ("a/agentctl:1,b/agentctl:2", ["a/agentctl:1", "b/agentctl:2"]),
        "workspace_size_limit": ("3Gi", "3Gi"),
        "start_timeout_seconds": ("7.5", 7.5),
        "start_retry_seconds": ("2", 2.0),
        "agentctl_host_override": ("127.0.0.1", "127.0.0.1"),
        "agentctl_network_policy": (
            '{"name": "guard", "clientNamespace": "ops", "clientLabels": {"app": "x"}}',
            AgentctlNetworkPolicy(name="guard", client_namespace="ops", client_labels={"app": "x"}),
        ),
        "agentctl_key_file": ("/var/run/key", Path("/var/run/key")),
        "egress_proxy": (
            '{"serviceNamespace": "ops", "serviceName": "proxy", "port": 81, "gitHosts": ["git.example"]}',
            EgressProxy(service_namespace="ops", service_name="proxy", port=81, git_hosts=["git.example"]),
        ),
        "default_budget": (
            '{"maxTokens": 1000, "maxCostUSD": "2.5"}',
            Budget(maxTokens=1000, maxCostUSD="2.5"),
        ),
        "metrics_port": ("0", 0),
        "metrics_host": ("127.0.0.1", "127.0.0.1"),
        "liveness_port": ("9081", 9081),
        "liveness_host": ("127.0.0.1", "127.0.0.1"),
        "max_concurrent_reconciles": ("4", 4),
        "watch_stall_seconds": ("30", 30.0),
        "leader_election": ("true", True),
        "leader_election_namespace": ("agentsession-system", "agentsession-system"),
        "leader_election_lease_name": ("ops.example", "ops.example"),
        "leader_election_lease_duration_seconds": ("30", 30),
        "leader_election_renew_deadline_seconds": ("7.5", 7.5),
        "leader_election_retry_period_seconds": ("1", 1.0),
        "log_format": ("json", "json"),
        "log_level": ("warning", "WARNING"),
        "verbose": ("true", True),
    },
    GatewayConfig: {
        "host": ("127.0.0.1", "127.0.0.1"),
        "port": ("9090", 9090),
        "metrics_host": ("127.0.0.1", "127.0.0.1"),
        "metrics_port": ("0", 0),
        "kubeconfig": ("/etc/kube/config", "/etc/kube/config"),
        "namespaces": ("a,b", ["a", "b"]),
        "insecure_dev_mode": ("true", True),
        "allowed_origins": (
            "https://A.example:443,http://b.example:8080",
            ["https://a.example", "http://b.example:8080"],
        ),
        "dev_warning_interval": ("5", 5.0),
        "log_format": ("json", "json"),
        "log_level": ("debug", "DEBUG"),
        "queue_size": ("16", 16),
        "queue_bytes": ("4096", 4096),
        "max_requests_in_flight": ("32", 32),
        "max_request_bytes_in_flight": ("8192", 8192),
        "shell_input_max_bytes": ("512", 512),
        "shell_input_queue_bytes": ("2048", 2048),
        "init_timeout": ("30", 30.0),
        "auth_cache_ttl": ("0", 0.0),
        "auth_cache_size": ("100", 100),
        "auth_negative_cache_size": ("64", 64),
        "auth_recheck_interval": ("0.5", 0.5),
        "auth_failure_burst": ("3", 3),
        "auth_failure_rate": ("0.25", 0.25),
        "max_token_reviews": ("4", 4),
        "max_connections_per_user": ("2", 2),
        "token_audiences": ("api,gateway", ["api", "gateway"]),
        "watch_inactivity_timeout": ("15", 15.0),
        "watch_server_timeout": ("60", 60),
        "agentctl_host_override": ("127.0.0.1", "127.0.0.1"),
        "agentctl_key_file": ("/var/run/key", Path("/var/run/key")),
        "agentctl_port_override": ("19999", 19999),
    },
    AgentctlSettings: {
        "host": ("127.0.0.1", "127.0.0.1"),
        "port": ("19999", 19999),
        "workdir": ("/srv/work", Path("/srv/work")),
        "state_dir": ("/srv/state", Path("/srv/state")),
        "agent_command": ("my-agent --acp", "my-agent --acp"),
        "agent_fifo_dir": ("/run/agentctl", Path("/run/agentctl")),
        "token": ("s3cret", SecretStr("s3cret")),
        "token_file": ("/run/token", Path("/run/token")),
        "auth": ("false", False),
        "permission_timeout": ("3", 3.0),
        "attach_timeout": ("4", 4.0),
        "drain_timeout": ("7.5", 7.5),
        "max_body_bytes": ("2048", 2048),
        "shell": ("/bin/sh -l", "/bin/sh -l"),
        "shell_umask": ("002", "002"),
        "log_format": ("json", "json"),
        "log_level": ("ERROR", "ERROR"),
    },
}
CASES = [(cls, field) for cls, samples in SAMPLES.items() for field in samples]


def _id(case: Any) -> str:
    return case.__name__ if isinstance(case, type) else str(case)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in os.environ:
        if name.startswith(("AGENTSESSION_", "AGENTCTL_")):
            monkeypatch.delenv(name)


def _flag(cls: type[BaseSettings], field: str, text: str, value: Any) -> list[str]:
    if isinstance(value, bool):
        on, off = flag_names(cls, field)[:2]
        return [on if value else off]
    return [flag_names(cls, field)[0], text]


@pytest.mark.parametrize("cls", list(SAMPLES), ids=_id)
def test_every_setting_has_a_sample(cls: type[BaseSettings]) -> None:
    assert set(SAMPLES[cls]) == set(cls.model_fields)


@pytest.mark.parametrize(("cls", "field"), CASES, ids=_id)
def test_a_variable_sets_it(cls: type[BaseSettings], field: str, monkeypatch: pytest.MonkeyPatch) -> None:
    text, value = SAMPLES[cls][field]
    monkeypatch.setenv(env_name(cls, field), text)
    assert getattr(load(cls, []), field) == value


@pytest.mark.parametrize(("cls", "field"), CASES, ids=_id)
def test_a_flag_sets_it(cls: type[BaseSettings], field: str) -> None:
    text, value = SAMPLES[cls][field]
    assert getattr(load(cls, _flag(cls, field, text, value)), field) == value


@pytest.mark.parametrize("cls", list(SAMPLES), ids=_id)
def test_defaults(cls: type[BaseSettings]) -> None:
    loaded = load(cls, [])
    for field, info in cls.model_fields.items():
        assert getattr(loaded, field) == info.get_default(call_default_factory=True), field


@pytest.mark.parametrize("cls", list(SAMPLES), ids=_id)
def test_an_empty_variable_means_the_default(
    cls: type[BaseSettings], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(env_name(cls, "log_level"), "")
    assert load(cls, []).model_dump()["log_level"] == "INFO"


def test_a_flag_wins_over_a_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSESSION_GATEWAY_PORT", "9000")
    monkeypatch.setenv("AGENTSESSION_GATEWAY_NAMESPACES", "x,y")
    monkeypatch.setenv("AGENTSESSION_GATEWAY_INSECURE_DEV_MODE", "true")
    monkeypatch.setenv("AGENTSESSION_GATEWAY_LOG_LEVEL", "ERROR")
    config = parse_args(["--port=9001", "--namespace", "z", "--no-insecure-dev-mode"])
    assert (config.port, config.namespaces, config.insecure_dev_mode) == (9001, ["z"], False)
    assert config.log_level == "ERROR"


def test_operator_flags_win_over_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSESSION_LIVENESS_PORT", "1")
    monkeypatch.setenv("AGENTSESSION_IMAGE", "from-env")
    config = load(OperatorConfig, ["--liveness-port=8081"])
    assert (config.liveness_port, config.image) == (8081, "from-env")


@pytest.mark.parametrize(
    "argv",
    [
        ["--namespace", "a", "--namespace", "b"],
        ["--namespaces", "a,b"],
        ["--namespace=a", "--namespaces=b"],
        ["--namespaces", '["a", "b"]'],
    ],
)
def test_a_list_flag_repeats_or_takes_commas_or_json(argv: list[str]) -> None:
    assert parse_args(argv).namespaces == ["a", "b"]


@pytest.mark.parametrize(
    ("text", "namespaces"), [('["ns1", "ns2"]', ["ns1", "ns2"]), ("[]", []), (" a , b ", ["a", "b"])]
)
def test_a_list_variable_is_json_or_comma_separated(
    text: str, namespaces: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The chart writes the operator's namespaces as a JSON list; people write the gateway's with commas.
    monkeypatch.setenv("AGENTSESSION_NAMESPACES", text)
    monkeypatch.setenv("AGENTSESSION_GATEWAY_NAMESPACES", text)
    assert load(OperatorConfig, []).namespaces == namespaces
    assert parse_args([]).namespaces == namespaces


@pytest.mark.parametrize(
    ("text", "on"), [("1", True), ("yes", True), ("TRUE", True), ("0", False), ("false", False)]
)
def test_a_switch_variable(text: str, on: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSESSION_GATEWAY_INSECURE_DEV_MODE", text)
    assert parse_args([]).insecure_dev_mode is on


def test_a_switch_flag_takes_no_value() -> None:
    assert parse_args(["--insecure-dev-mode"]).insecure_dev_mode is True
    assert load(OperatorConfig, ["--verbose"]).verbose is True
    assert load(AgentctlSettings, ["--no-auth"]).auth is False


def test_nested_operator_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSESSION_AGENT_RESOURCES__LIMITS", '{"cpu": "4"}')
    config = load(OperatorConfig, ["--agentctl-resources.requests", "cpu=1"])
    assert config.agent_resources.limits == {"cpu": "4"}
    assert config.agentctl_resources.requests == {"cpu": "1"}


def test_an_unknown_flag_fails_and_says_which(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(["--no-such-flag"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "agentsession-gateway: error: unrecognized arguments: --no-such-flag" in err


@pytest.mark.parametrize(
    ("env", "argv", "says"),
    [
        ({}, ["--port", "http"], "--port / AGENTSESSION_GATEWAY_PORT: Input should be a valid integer"),
        ({"AGENTSESSION_GATEWAY_QUEUE_SIZE": "0"}, [], "--queue-size / AGENTSESSION_GATEWAY_QUEUE_SIZE: "),
        ({}, ["--log-level", "loud"], "--log-level / AGENTSESSION_GATEWAY_LOG_LEVEL: Input should be"),
    ],
)
def test_a_bad_value_fails_and_names_the_setting(
    env: dict[str, str],
    argv: list[str],
    says: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2
    assert says in capsys.readouterr().err


def test_bad_json_in_a_variable_fails_cleanly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENTSESSION_AGENT_PROFILES", "{not json")
    with pytest.raises(SystemExit):
        load(OperatorConfig, [])
    assert (
        'agentsession-operator: error: error parsing value for field "agent_profiles"'
        in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["--leader-election-renew-deadline-seconds", "15"],
        ["--leader-election-retry-period-seconds", "10"],
        ["--leader-election-lease-duration-seconds", "5"],
    ],
)
def test_leader_election_times_must_nest(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """The leader must give up before a standby may take over: retry period < renew deadline < lease duration."""
    assert load(OperatorConfig, argv).leader_election is False  # nothing to check while it is off
    with pytest.raises(SystemExit) as exited:
        load(OperatorConfig, ["--leader-election", *argv])
    assert exited.value.code == 2
    assert "needs retry period < renew deadline < lease duration" in capsys.readouterr().err


# ---------------------------------------------------------------- agentctl's resolved configuration


def test_agentctl_reads_its_token_from_the_variable_the_pod_sets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert env_name(AgentctlSettings, "token") == TOKEN_ENV
    monkeypatch.setenv(TOKEN_ENV, " t0ken \n")
    monkeypatch.setenv("AGENTCTL_OTHER", "kept from children")
    config = parse_config(["--workdir", str(tmp_path), "--shell", "/bin/sh"])
    assert config.token == "t0ken"
    assert config.workdir == tmp_path.resolve()
    assert config.state_dir == tmp_path.resolve() / ".agentctl"
    assert config.shell_command == ("/bin/sh",)
    assert not any(name.startswith("AGENTCTL_") for name in config.child_env)


def test_agentctl_token_file_wins_and_no_auth_needs_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "token").write_text("from-file\n")
    monkeypatch.setenv(TOKEN_ENV, "from-env")
    assert (
        parse_config(["--workdir", str(tmp_path), "--token-file", str(tmp_path / "token")]).token
        == "from-file"
    )
    monkeypatch.delenv(TOKEN_ENV)
    with pytest.raises(ConfigError, match="no token"):
        parse_config(["--workdir", str(tmp_path)])
    monkeypatch.setenv("AGENTCTL_AUTH", "false")
    assert parse_config(["--workdir", str(tmp_path)]).token is None


def test_agentctl_agent_command_and_fifo_dir_exclude_each_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENTCTL_AGENT_COMMAND", "my-agent --acp")
    config = parse_config(["--workdir", str(tmp_path), "--no-auth"])
    assert (config.agent_command, config.transport_name) == (("my-agent", "--acp"), "subprocess")
    with pytest.raises(SystemExit):
        parse_config(["--workdir", str(tmp_path), "--no-auth", "--agent-fifo-dir", str(tmp_path)])
    assert "agent_command and agent_fifo_dir exclude each other" in capsys.readouterr().err


# ---------------------------------------------------------------- --help and docs/configuration.md


@pytest.mark.parametrize(("prog", "cls"), PROGRAMS.items(), ids=list(PROGRAMS))
def test_help_shows_every_flag_and_description(
    prog: str, cls: type[BaseSettings], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        load(cls, ["--help"])
    assert exited.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert shown.startswith(f"usage: {prog} ")
    for field, info in cls.model_fields.items():
        assert info.description, f"{cls.__name__}.{field} has no description"
        assert " ".join(info.description.split()) in shown
        for flag in flag_names(cls, field):
            assert re.search(rf"{re.escape(flag)}\b(?![-.])", shown), flag


def _doc_default(value: Any) -> str | None:
    """How the doc writes a default; None where it explains one in words (profiles, resources)."""
    if value is None:
        return "unset"
    if value == []:
        return "empty"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, str | int | Path):
        return f"`{value}`"
    return None


def _doc_rows(prog: str) -> dict[str, list[str]]:
    section = DOC.read_text(encoding="utf-8").split(f"\n## `{prog}`\n", 1)[1].split("\n## ", 1)[0]
    rows = [
        [cell.strip() for cell in line.strip("| ").split(" | ")]
        for line in section.splitlines()
        if line.startswith("| `")
    ]
    return {row[0].strip("`"): row for row in rows}


@pytest.mark.parametrize(("prog", "cls"), PROGRAMS.items(), ids=list(PROGRAMS))
def test_the_doc_has_one_row_per_setting(prog: str, cls: type[BaseSettings]) -> None:
    rows = _doc_rows(prog)
    assert list(rows) == list(cls.model_fields)
    for field, info in cls.model_fields.items():
        _, flags, env, default, meaning = rows[field]
        assert flags == ", ".join(f"`{flag}`" for flag in flag_names(cls, field)), field
        assert env == f"`{env_name(cls, field)}`", field
        assert meaning == info.description, field
        expected = _doc_default(info.get_default(call_default_factory=True))
        assert default == expected if expected is not None else default, field
