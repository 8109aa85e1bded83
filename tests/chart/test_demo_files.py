"""The demo's own files: the script parses and passes shellcheck, the client reads gateway frames right."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from types import ModuleType

import pytest

from tests.conftest import REPO_ROOT

DEMO = REPO_ROOT / "hack" / "demo.sh"


def _client() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo_client", REPO_ROOT / "hack" / "demo_client.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_demo_script_parses() -> None:
    subprocess.run(["bash", "-n", str(DEMO)], check=True, timeout=30)


def test_demo_script_passes_shellcheck() -> None:
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck is not installed")
    proc = subprocess.run(["shellcheck", str(DEMO)], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout


def test_make_demo_runs_the_script() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "demo:\n\thack/demo.sh" in makefile


@pytest.mark.parametrize(
    ("notification", "expected"),
    [
        (
            {"update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Hi"}}},
            ("agent_message_chunk", "Hi"),
        ),
        (
            {
                "update": {
                    "sessionUpdate": "tool_call",
                    "toolCallId": "c1",
                    "title": "List",
                    "status": "pending",
                }
            },
            ("tool_call", "List (pending)"),
        ),
        (
            {"update": {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed"}},
            ("tool_call_update", "c1 (completed)"),
        ),
        (
            {"update": {"sessionUpdate": "current_mode_update", "currentModeId": "code"}},
            ("current_mode_update", "code"),
        ),
        ({"update": {"sessionUpdate": "plan", "entries": []}}, ("plan", None)),
    ],
)
def test_demo_client_describes_updates(
    notification: dict[str, object], expected: tuple[str, str | None]
) -> None:
    assert _client().describe_update(notification) == expected
