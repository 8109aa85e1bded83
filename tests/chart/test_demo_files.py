"""The demo's own files: `make demo` runs the script, the client reads gateway frames right."""

from __future__ import annotations

import importlib.util
from types import ModuleType

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


def test_demo_client_speaks_through_the_plugins_protocol_code() -> None:
    from agentsession.kubectl_plugin import client as plugin_client
    from agentsession.kubectl_plugin import conversation, render

    client = _client()
    for shared, home in (
        ("describe_update", render),
        ("choose_option", conversation),
        ("ws_connect", plugin_client),
    ):
        assert getattr(client, shared) is getattr(home, shared), shared


def test_demo_ends_with_the_web_console_and_the_plugin() -> None:
    script = DEMO.read_text()
    # The console's address is the demo's own port-forward (or the Service), the token the demo's client's.
    assert 'say "web console: open $console ' in script
    assert "kubectl -n $DEMO_NS create token demo-client" in script
    assert 'say "  kubectl agentsession attach $SESSION -n $DEMO_NS$as_user"' in script
