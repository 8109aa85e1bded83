"""What a session may do through the proxy: reach a host, spend on a model, push to git. Pure decisions."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from agentsession.api.egress import Budget, Usage, effective_allow, effective_budget, exhausted, host_allowed
from agentsession.egress_proxy.directory import SessionInfo
from agentsession.egress_proxy.identity import Refusal

RECEIVE_PACK = "git-receive-pack"


def egress_refusal(
    session: SessionInfo,
    host: str,
    port: int,
    ports: Collection[int],
    namespace_annotations: Mapping[str, str],
    chart_allow: Iterable[str],
) -> Refusal | None:
    """None when the session may reach host:port; else why not, with what to change."""
    who = f"session {session.namespace}/{session.name}"
    if port not in ports:
        allowed = ", ".join(str(p) for p in sorted(ports)) or "none"
        return Refusal(
            403,
            "port_not_allowed",
            f"egress to {host}:{port} refused for {who}: only ports {allowed} are open",
        )
    patterns = effective_allow(session.network, namespace_annotations, chart_allow)
    if not host_allowed(host, patterns):
        return Refusal(
            403,
            "host_not_allowed",
            f"egress to {host} refused for {who}: the host is not on its allowlist; "
            "add it to spec.network.egress.allow",
        )
    return None


def budget_refusal(
    session: SessionInfo, usage: Usage, namespace_annotations: Mapping[str, str], chart: Budget
) -> Refusal | None:
    reason = exhausted(usage, effective_budget(session.budget, namespace_annotations, chart))
    if reason is None:
        return None
    return Refusal(403, "budget_exhausted", f"budget exhausted: {reason}; raise spec.budget to go on")


def is_push(path: str, query: Mapping[str, str]) -> bool:
    """Smart HTTP's push: the ref advertisement for receive-pack, or the pack it posts."""
    return path.rstrip("/").endswith("/" + RECEIVE_PACK) or query.get("service") == RECEIVE_PACK


def push_refusal(session: SessionInfo, host: str) -> Refusal | None:
    if session.network is not None and session.network.git is not None and session.network.git.push:
        return None
    return Refusal(
        403,
        "push_not_allowed",
        f"git push to {host} refused for session {session.namespace}/{session.name}: "
        "set spec.network.git.push to true to allow it",
    )
