"""The plugin's one file, built as `make plugin` builds it and copied onto the PATH as the docs say, run by kubectl
as a real process: its help is the parser's, a usage error exits 2, and `suspend` and `resume` reach the fake API
server with the kubeconfig they are given (one of them, for a session that is not there, fails as it says)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentsession.kubectl_plugin import cli
from agentsession.kubectl_plugin.errors import EXIT_FAILED, EXIT_USAGE
from tests.conftest import REPO_ROOT
from tests.support.fake_api import FakeApi, session_manifest
from tests.support.plugin import install_plugin, plugin_path, run_plugin

NS = "plugin"
# The help's line width, the same for the process and for the parser the test asks.
COLUMNS = "100"


@pytest.fixture
def path(tmp_path: Path, kubectl: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", COLUMNS)
    return plugin_path(install_plugin(tmp_path / "bin").parent, kubectl)


def test_make_plugin_builds_the_file_with_the_code_the_tests_build_it_with() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert (
        "plugin:\n\tPYTHONPATH=operator $(PYTHON) -m agentsession.kubectl_plugin.build $(PLUGIN)\n"
        in makefile
    )
    assert "PLUGIN := build/kubectl-agentsession\n" in makefile


async def test_kubectl_runs_the_file_and_its_help_is_the_parsers(kubectl: str, path: str) -> None:
    code, run = await run_plugin(kubectl, path, "--help")
    assert code == 0, run
    assert run.stdout == cli.parser().format_help()
    assert run.stdout.startswith("usage: kubectl agentsession [-h] COMMAND ...\n"), run

    code, run = await run_plugin(kubectl, path, "prompt", "only-a-name")
    assert code == EXIT_USAGE, run
    assert "the following arguments are required: text" in run.stderr


async def test_suspend_and_resume_patch_the_session_with_the_kubeconfig_given(
    kubectl: str, path: str, tmp_path: Path
) -> None:
    async with FakeApi().serving() as api:
        await api.put(session_manifest(NS, "demo", ready=True))
        reach = ("-n", NS, "--kubeconfig", str(api.kubeconfig(tmp_path / "kubeconfig")))

        code, run = await run_plugin(kubectl, path, "suspend", "demo", *reach)
        assert code == 0, run
        assert run.stdout == "agentsession.agentsession.dev/demo suspended\n"
        assert api.sessions[(NS, "demo")]["spec"]["suspend"] is True

        code, run = await run_plugin(kubectl, path, "resume", "demo", *reach)
        assert code == 0, run
        assert run.stdout == "agentsession.agentsession.dev/demo resumed\n"
        assert api.sessions[(NS, "demo")]["spec"]["suspend"] is False

        code, run = await run_plugin(kubectl, path, "suspend", "ghost", *reach)
        assert code == EXIT_FAILED, run
        assert run.stderr == f"error: no agentsessions.agentsession.dev/ghost in namespace {NS}\n"
