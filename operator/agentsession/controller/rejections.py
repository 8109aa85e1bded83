"""The API server's refusal of a child (Pod, claim, Secret, the namespace's agentctl NetworkPolicy) → the reason and message the session shows. Pure.

A refused create is the user's to fix (a spec the API server or an admission webhook cannot accept, a quota, a
policy), so it is a status with a reason, not an error that retries in the background where nobody sees it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from agentsession.api import reasons

# 400: malformed, 403: admission, quota or RBAC, 422: invalid. Other statuses are outages: retried as errors.
REFUSALS = frozenset({400, 403, 422})
REASON_BY_KIND = {
    "Pod": reasons.POD_REJECTED,
    "PersistentVolumeClaim": reasons.WORKSPACE_REJECTED,
    "Secret": reasons.SECRET_REJECTED,
    "NetworkPolicy": reasons.NETWORK_POLICY_REJECTED,
}
WHAT_BY_KIND = {
    "Pod": "pod",
    "PersistentVolumeClaim": "workspace claim",
    "Secret": "agentctl token Secret",
    "NetworkPolicy": "NetworkPolicy that guards agentctl",
}
# A refusal is looked at again after as long as it has lasted, within these bounds: soon at first, rarely later.
MIN_RETRY_SECONDS = 5.0
MAX_RETRY_SECONDS = 300.0


@dataclass(frozen=True)
class Rejection:
    reason: str
    message: str


def rejection(kind: str | None, status: int | None, api_message: str) -> Rejection | None:
    """What to show for an API server's answer to creating a child; None when it is not a refusal."""
    if kind is None or status not in REFUSALS:
        return None
    what = WHAT_BY_KIND.get(kind, kind)
    if status == 403 and "exceeded quota" in api_message:
        return Rejection(
            reasons.QUOTA_EXCEEDED,
            f"the {what} does not fit the namespace's ResourceQuota: {api_message}; "
            "lower the session's resources or raise the quota (retried)",
        )
    if status == 403:
        return Rejection(
            reasons.FORBIDDEN,
            f"the API server forbids creating the {what}: {api_message}; "
            "check admission policies (Pod Security, webhooks) and the operator's RBAC",
        )
    return Rejection(
        REASON_BY_KIND.get(kind, reasons.REJECTED_OTHER),
        f"the API server refused the {what}: {api_message}; fix the AgentSession's spec",
    )


def retry_after(failing_since: datetime | None, now: datetime) -> float:
    """Seconds until a refused create is tried again: as long as the refusal has lasted, bounded."""
    lasted = (now - failing_since).total_seconds() if failing_since else 0.0
    return min(MAX_RETRY_SECONDS, max(MIN_RETRY_SECONDS, lasted))
