"""Every condition reason an AgentSession's status can carry, each once, with what it means to each reader.

The status mapper writes these reasons; the phase it derives, the Warning Events the transitions post, the refusals
of the API server and what the gateway shows a client are all read from the classes here. A new reason is one line
in this table (and the code that writes it). Reasons the kubelet writes (a container's waiting reason) pass through
the mapper as the kubelet gives them: those the operator knows are listed here, one it does not know classes as
nothing (the session shows Starting).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Flag, auto


class Class(Flag):
    """What a reason means. A reason may be in several classes, or in none (UNCLASSED: it is said, not acted on)."""

    # The Ready condition with it makes the phase Failed: it will not fix itself without a change by the user.
    FAILED = auto()
    # The Ready condition with it makes the phase Pending: the pod does not run yet, for a reason outside it.
    PENDING = auto()
    # A condition turning to it posts a Warning Event.
    WARNING = auto()
    # AgentInitialized with it: agentctl is ready and the ACP start call is due.
    START_DUE = auto()
    # The kubelet cannot get a container's image.
    IMAGE_PULL = auto()
    # The API server refused one of the session's children (a spec, an admission webhook or RBAC said no).
    REJECTED = auto()


@dataclass(frozen=True)
class Reason:
    name: str
    classes: Class
    # AgentInitialized with this reason shows a client `failed` with the condition's message, else this one.
    client_error: str | None = None


_TABLE: dict[str, Reason] = {}
UNCLASSED = Class(0)


def _reason(name: str, classes: Class = UNCLASSED, *, client_error: str | None = None) -> str:
    if name in _TABLE:
        raise ValueError(f"reason {name} is in the table twice: keep one line per reason")
    _TABLE[name] = Reason(name, classes, client_error)
    return name


FAILED, PENDING, WARNING = Class.FAILED, Class.PENDING, Class.WARNING
START_DUE, IMAGE_PULL, REJECTED = Class.START_DUE, Class.IMAGE_PULL, Class.REJECTED

# --- no pod (PodScheduled, and the conditions after it) ---
POD_NOT_CREATED = _reason("PodNotCreated", PENDING)
POD_DELETED = _reason("PodDeleted", PENDING | WARNING)
INVALID_SPEC = _reason("InvalidSpec", FAILED | WARNING)
# The operator sends pods through an egress proxy whose Service it cannot find: no pod until it appears.
EGRESS_PROXY_UNAVAILABLE = _reason("EgressProxyUnavailable", PENDING | WARNING)
SUSPENDED = _reason("Suspended")
# The API server's refusals of a child (`controller/rejections.py`).
POD_REJECTED = _reason("PodRejected", REJECTED | FAILED | WARNING)
WORKSPACE_REJECTED = _reason("WorkspaceRejected", REJECTED | FAILED | WARNING)
SECRET_REJECTED = _reason("SecretRejected", REJECTED | FAILED | WARNING)
NETWORK_POLICY_REJECTED = _reason("NetworkPolicyRejected", REJECTED | FAILED | WARNING)
FORBIDDEN = _reason("Forbidden", REJECTED | FAILED | WARNING)
# A refused child of a kind the operator does not name (it creates none such): said, not classed.
REJECTED_OTHER = _reason("Rejected")
QUOTA_EXCEEDED = _reason("QuotaExceeded", PENDING | WARNING)

# --- the pod (PodScheduled, AgentctlReady) ---
POD_TERMINATING = _reason("PodTerminating")
SCHEDULED = _reason("Scheduled")
UNSCHEDULABLE = _reason("Unschedulable", PENDING | WARNING)
POD_PENDING = _reason("Pending", PENDING)
# A failed pod: its own reason when it is one of these two, else PodFailed.
POD_FAILED = _reason("PodFailed", FAILED | WARNING)
EVICTED = _reason("Evicted", FAILED | WARNING)
DEADLINE_EXCEEDED = _reason("DeadlineExceeded", FAILED | WARNING)
# The node stopped reporting: what its containers last reported is out of date.
NODE_NOT_READY = _reason("NodeNotReady", WARNING)
CONTAINER_CREATING = _reason("ContainerCreating")
PROBE_SUCCEEDED = _reason("ProbeSucceeded")
TERMINATED = _reason("Terminated")
STARTING = _reason("Starting")
PROBE_FAILING = _reason("ProbeFailing", WARNING)

# --- a container's waiting reason, as the kubelet writes it ---
WAITING = _reason("Waiting")  # a waiting state with no reason
POD_INITIALIZING = _reason("PodInitializing")
CRASH_LOOP_BACK_OFF = _reason("CrashLoopBackOff", FAILED | WARNING)
CREATE_CONTAINER_CONFIG_ERROR = _reason("CreateContainerConfigError", FAILED | WARNING)
CREATE_CONTAINER_ERROR = _reason("CreateContainerError", FAILED | WARNING)
RUN_CONTAINER_ERROR = _reason("RunContainerError", FAILED | WARNING)
ERR_IMAGE_PULL = _reason("ErrImagePull", IMAGE_PULL | PENDING | WARNING)
IMAGE_PULL_BACK_OFF = _reason("ImagePullBackOff", IMAGE_PULL | PENDING | WARNING)
ERR_IMAGE_NEVER_PULL = _reason("ErrImageNeverPull", IMAGE_PULL | PENDING | WARNING)
INVALID_IMAGE_NAME = _reason("InvalidImageName", IMAGE_PULL | PENDING | FAILED | WARNING)

# --- the ACP session (AgentInitialized) ---
AGENTCTL_NOT_READY = _reason("AgentctlNotReady")
INITIALIZING = _reason("Initializing", START_DUE)
AGENTCTL_RESTARTED = _reason("AgentctlRestarted", START_DUE | WARNING)
AGENT_RESTARTED = _reason("AgentRestarted", START_DUE | WARNING)
AGENT_EXITED = _reason("AgentExited", START_DUE | WARNING)
INITIALIZE_FAILED = _reason("InitializeFailed", START_DUE | WARNING, client_error="ACP initialization failed")
# The agent container runs but is not ready after its ACP session started: agentctl answers that readiness probe
# from its ACP connection, which it has lost. Nothing fixes itself short of the agent answering again.
AGENT_NOT_ANSWERING = _reason("AgentNotAnswering", FAILED | WARNING)
INITIALIZED = _reason("Initialized")

# --- Suspended, Ready, RestartPending, BudgetExhausted ---
ACTIVE = _reason("Active")
TERMINATING = _reason("Terminating")
READY = _reason("Ready")
TURN_RUNNING = _reason("TurnRunning")
BUDGET_EXHAUSTED = _reason("BudgetExhausted")
WITHIN_BUDGET = _reason("WithinBudget")

REASONS: Mapping[str, Reason] = _TABLE


def of_class(kind: Class) -> frozenset[str]:
    """The reasons in class `kind`."""
    return frozenset(name for name, reason in REASONS.items() if kind in reason.classes)


def is_in(name: str, kind: Class) -> bool:
    """Whether reason `name` is in class `kind`; a reason not in the table is in none."""
    reason = REASONS.get(name)
    return reason is not None and kind in reason.classes


def client_error(name: str) -> str | None:
    """What a client is shown as the error of a session whose AgentInitialized has this reason, when the condition
    says nothing; None when the reason is no failure to a client."""
    reason = REASONS.get(name)
    return reason.client_error if reason is not None else None
