"""How a command ends: what went wrong, said for the person at the terminal, and the exit status."""

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
STOP_REASON_EXIT = {
    "end_turn": 0,
    "max_tokens": 3,
    "max_turn_requests": 4,
    "refusal": 5,
    "cancelled": 6,
    "error": 7,
}
EXIT_OTHER_STOP = 8


class PluginError(Exception):
    """What went wrong, said for the person at the terminal; the command exits with EXIT_FAILED."""


class NoKubeconfig(PluginError):
    """The kubeconfig could not be loaded."""


class GatewayError(PluginError):
    def __init__(self, action: str, code: str, message: str) -> None:
        super().__init__(f"{action} failed: {code}: {message}")
        self.code = code


def exit_status(stop_reason: str | None) -> int:
    """`prompt`'s exit status for the stop reason its turn ended with."""
    return STOP_REASON_EXIT.get(stop_reason or "", EXIT_OTHER_STOP)
