"""The demo's own files: `make demo` runs the script, the client reads gateway frames right."""

from __future__ import annotations

import importlib.util
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
