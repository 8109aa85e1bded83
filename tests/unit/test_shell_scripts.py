"""Every shell script of the project parses and passes shellcheck (installed by hack/tools/install.sh; a failure
rather than a skip under CI)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, require_tool

SCRIPTS = sorted([*REPO_ROOT.glob("hack/**/*.sh"), REPO_ROOT / ".ci" / "run"])


def test_the_list_covers_the_scripts_the_makefile_runs() -> None:
    names = {p.relative_to(REPO_ROOT).as_posix() for p in SCRIPTS}
    assert {"hack/demo.sh", "hack/cluster/up.sh", "hack/image/build.sh", ".ci/run"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.relative_to(REPO_ROOT).as_posix())
def test_script_parses_and_passes_shellcheck(script: Path) -> None:
    parsed = subprocess.run(
        ["bash", "-n", str(script)], capture_output=True, text=True, timeout=30, check=False
    )
    assert parsed.returncode == 0, parsed.stderr
    shellcheck = require_tool("shellcheck")
    # -x follows `source`d files; relative to the script's own directory, as the scripts source them.
    linted = subprocess.run(
        [shellcheck, "-x", script.name],
        cwd=script.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert linted.returncode == 0, linted.stdout
