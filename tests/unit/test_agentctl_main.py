"""agentctl takes its port before it loads its settings, and keeps it only where the settings say; it keeps its
environment (its token) from the processes it starts."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from agentsession.agentctl.main import bound_to, early_listen, given_address


@pytest.mark.parametrize(
    ("argv", "environ", "address"),
    [
        (["--port", "9999", "--workdir", "/w"], {}, ("0.0.0.0", 9999)),
        (["--port=8080", "--host=127.0.0.1"], {}, ("127.0.0.1", 8080)),
        ([], {"AGENTCTL_PORT": "7000", "AGENTCTL_HOST": "::1"}, ("::1", 7000)),
        (["--port", "7001"], {"AGENTCTL_PORT": "7000"}, ("0.0.0.0", 7001)),
        ([], {}, None),
        (["--port", "ninety"], {}, None),
        (["--port"], {}, None),
    ],
)
def test_the_address_is_read_from_flags_over_variables(
    argv: list[str], environ: dict[str, str], address: tuple[str, int] | None
) -> None:
    assert given_address(argv, environ) == address


def test_the_early_socket_is_kept_only_for_the_same_address() -> None:
    sock = early_listen(["--host", "127.0.0.1", "--port", "0"], {})
    assert sock is not None
    try:
        port = sock.getsockname()[1]
        assert bound_to(sock, "127.0.0.1", port)
        assert not bound_to(sock, "127.0.0.1", port + 1)
        assert not bound_to(sock, "127.0.0.2", port)
        assert not bound_to(sock, "localhost", port)  # a name: the settings bind it themselves
    finally:
        sock.close()


def test_a_port_taken_early_leaves_the_error_to_the_settings() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert early_listen(["--host", "127.0.0.1", "--port", str(port)], {}) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
@pytest.mark.parametrize(("call", "dumpable"), [("keep_to_itself()", "0"), ("None", "1")])
def test_agentctl_is_not_dumpable_so_its_shell_cannot_read_its_environment(call: str, dumpable: str) -> None:
    """Non-dumpable, its /proc files belong to root: the shell, of the same user, cannot read /proc/1/environ."""
    script = (
        "import ctypes; from agentsession.agentctl.main import keep_to_itself; "
        f"{call}; print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))"  # PR_GET_DUMPABLE
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == dumpable
