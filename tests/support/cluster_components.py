"""One component of the local cluster stopped and started again (`hack/cluster/component.sh`), for tests of what
sessions show while a part of the cluster is down. Only where the tests run on the local cluster's machine."""

from __future__ import annotations

import subprocess

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "hack" / "cluster" / "component.sh"
# up.sh waits up to 2 minutes for the node; stopping waits 10 s for SIGTERM, then kills.
TIMEOUT = 180.0


def _run(action: str, name: str) -> None:
    done = subprocess.run(
        [str(SCRIPT), action, name], capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"hack/cluster/component.sh {action} {name} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        )


def stop(name: str) -> None:
    _run("stop", name)


def start(name: str) -> None:
    """Starts it with up.sh's command line and returns once the cluster is ready again."""
    _run("start", name)
