"""`make plugin`: the plugin as one executable file to copy onto the PATH as `kubectl-agentsession`
(docs/kubectl-plugin.md), a zipapp of this package that the `python3` on the PATH runs.

    python -m agentsession.kubectl_plugin.build build/kubectl-agentsession
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import zipapp
from pathlib import Path

INTERPRETER = "/usr/bin/env python3"
ENTRY_POINT = "agentsession.kubectl_plugin.cli:main"
FILE_MODE = 0o755
# The archive's root is the folder that holds the `agentsession` package: the plugin's modules import each other
# by their full names, as they do installed.
SOURCE_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path("agentsession", "kubectl_plugin")
PARENT_INIT = Path("agentsession", "__init__.py")


def shipped(path: Path) -> bool:
    """Whether the archive holds `path` (relative to SOURCE_ROOT): the package's modules and the `__init__.py` of
    the package above it; not this builder, which only `make` runs."""
    if path == PARENT_INIT:
        return True
    return path.parent == PACKAGE and path.suffix == ".py" and path.name != Path(__file__).name


def build(target: Path) -> Path:
    """Writes the file at `target`, executable by everyone; through a temporary file beside it, so that a copy taken
    while it is written is never half of one."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    os.close(fd)
    try:
        zipapp.create_archive(
            SOURCE_ROOT, partial, interpreter=INTERPRETER, main=ENTRY_POINT, filter=shipped, compressed=True
        )
        os.chmod(partial, FILE_MODE)
        os.replace(partial, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
    return target


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("target", type=Path, help="the file to write, e.g. build/kubectl-agentsession")
    print(build(args.parse_args().target))


if __name__ == "__main__":
    main()
