"""Names of the API and of the labels and children the operator manages."""

from typing import Final

GROUP: Final = "agentsession.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "AgentSession"
PLURAL: Final = "agentsessions"
SINGULAR: Final = "agentsession"
SHORT_NAME: Final = "ags"

LABEL_SESSION: Final = f"{GROUP}/name"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_INSTANCE: Final = "app.kubernetes.io/instance"
LABEL_PART_OF: Final = "app.kubernetes.io/part-of"
MANAGER: Final = "agentsession-operator"

# Session names become prefixes of child names ("-agentctl-token" is the longest suffix, 63-char limit).
MAX_NAME_LENGTH: Final = 48

AGENTCTL_CONTAINER: Final = "agentctl"
AGENT_CONTAINER: Final = "agent"
TOKEN_KEY: Final = "token"
FIFO_DIR: Final = "/run/agentctl"
# The stop handshake in FIFO_DIR: the agent container's wrapper asks, agentctl drains and answers.
STOP_REQUEST_FILE: Final = "stop-requested"
STOPPED_FILE: Final = "stopped"
# lifecycle.drainTimeout when unset: the pod's grace period adds the cancel grace and a margin to it.
DEFAULT_DRAIN_SECONDS: Final = 20


def pod_name(session: str) -> str:
    return f"{session}-agent"


def token_secret_name(session: str) -> str:
    return f"{session}-agentctl-token"


def workspace_claim_name(session: str) -> str:
    return f"{session}-workspace"
