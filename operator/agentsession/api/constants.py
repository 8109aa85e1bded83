"""Names of the API and of the labels and children the operator manages."""

from typing import Final

GROUP: Final = "agentsession.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "AgentSession"
PLURAL: Final = "agentsessions"
SINGULAR: Final = "agentsession"
SHORT_NAME: Final = "ags"
POOL_KIND: Final = "AgentSessionPool"
POOL_PLURAL: Final = "agentsessionpools"
POOL_SINGULAR: Final = "agentsessionpool"
POOL_SHORT_NAME: Final = "agspool"

LABEL_SESSION: Final = f"{GROUP}/name"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_INSTANCE: Final = "app.kubernetes.io/instance"
LABEL_PART_OF: Final = "app.kubernetes.io/part-of"
MANAGER: Final = "agentsession-operator"
# A warm pod of a pool carries its pool's name here until a session claims it.
LABEL_POOL: Final = f"{GROUP}/pool"
# On a pool's pod: the digest of its shape, which a claiming session's pod must have (`pod_builder.shape_hash`).
SHAPE_HASH_ANNOTATION: Final = f"{GROUP}/pod-shape-hash"
# On a claimed pod: the pool it came from.
LABEL_CLAIMED_FROM: Final = f"{GROUP}/claimed-from"

# Session names become prefixes of child names ("-agentctl-token" is the longest suffix, 63-char limit).
MAX_NAME_LENGTH: Final = 48
# A pool's pods are named after it and a suffix of MEMBER_SUFFIX_LENGTH characters and a dash.
MEMBER_SUFFIX_LENGTH: Final = 5
MAX_POOL_NAME_LENGTH: Final = MAX_NAME_LENGTH - MEMBER_SUFFIX_LENGTH - 1

AGENTCTL_CONTAINER: Final = "agentctl"
AGENT_CONTAINER: Final = "agent"
TOKEN_KEY: Final = "token"
# The type of the agentctl token Secrets: the one type the operator may create (an admission policy says so).
TOKEN_SECRET_TYPE: Final = f"{GROUP}/agentctl-token"
FIFO_DIR: Final = "/run/agentctl"
# agentctl's own directory in a pod: its journal and session record, and the terminal's HOME. Only agentctl's
# container mounts it.
AGENTCTL_DIR: Final = "/var/lib/agentctl"
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
