"""What a person reads: a session's journal as a transcript (the demo client's as well), and a session's row in
`get` and its description in `status`."""

from __future__ import annotations

import json
from typing import Any, TextIO


def describe_update(notification: dict[str, Any]) -> tuple[str, str | None]:
    """(kind, text) of an ACP session/update notification: the text of a chunk, or a short summary."""
    update = notification.get("update", notification)
    kind = update.get("sessionUpdate") or update.get("session_update") or "update"
    if kind in ("agent_message_chunk", "user_message_chunk", "agent_thought_chunk"):
        content = update.get("content") or {}
        return kind, content.get("text", "")
    if kind in ("tool_call", "tool_call_update"):
        title = update.get("title") or update.get("toolCallId", "")
        return kind, f"{title} ({update.get('status', '')})"
    if kind == "current_mode_update":
        return kind, update.get("currentModeId") or update.get("modeId")
    return kind, None


_CHUNK_LABELS = {
    "user_message_chunk": "you",
    "agent_message_chunk": "agent",
    "agent_thought_chunk": "thought",
}


class Transcript:
    """A session's journal as a person reads it: a message's chunks run on in one paragraph as they arrive, and
    everything else takes a line of its own."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._open: str | None = None  # the chunk kind whose paragraph is being written

    def entry(self, kind: str, notification: dict[str, Any]) -> None:
        """One journal entry (`kind` as agentctl journals it: session_update, permission_request, ...)."""
        if kind == "session_update":
            what, text = describe_update(notification)
            if what in _CHUNK_LABELS:
                self._chunk(what, text or "")
            else:
                self.line(f"{what}: {text}" if text else what)
        elif kind == "permission_request":
            self.line(permission_question(notification))
        elif kind == "permission_resolved":
            self.line(
                f"permission: {describe_outcome(notification.get('outcome'))} ({notification.get('reason')})"
            )
        elif kind == "turn_end":
            error = notification.get("error")
            self.line(f"[turn ended: {notification.get('stopReason')}" + (f": {error}]" if error else "]"))
        elif kind == "agent_error":
            self.line(f"[agent error: {notification.get('message') or notification}]")
        else:
            self.line(f"[{kind}: {json.dumps(notification, sort_keys=True)}]")

    def _chunk(self, kind: str, text: str) -> None:
        if self._open != kind:
            self.end_paragraph()
            self.out.write(f"{_CHUNK_LABELS[kind]}: ")
            self._open = kind
        self.out.write(text)
        self.out.flush()

    def end_paragraph(self) -> None:
        if self._open is not None:
            self.out.write("\n")
            self._open = None

    def line(self, text: str) -> None:
        self.end_paragraph()
        self.out.write(text + "\n")
        self.out.flush()


def permission_question(pending: dict[str, Any]) -> str:
    title = (pending.get("tool_call") or {}).get("title") or "a tool call"
    options = pending.get("options") or []
    choices = "  ".join(
        f"[{i}] {o.get('name') or o.get('optionId')} ({o.get('optionId')})" for i, o in enumerate(options, 1)
    )
    return f"permission requested: {title}: {choices}"


def describe_outcome(outcome: Any) -> str:
    if isinstance(outcome, dict):
        if outcome.get("outcome") == "selected":
            return f"selected {outcome.get('optionId')}"
        return str(outcome.get("outcome"))
    return str(outcome)


BUDGET_CONDITION = "BudgetExhausted"
BUDGET_LIMITS = (("maxRequests", "requests"), ("maxTokens", "tokens"), ("maxCostUSD", "USD"))


def _usage(body: dict[str, Any]) -> dict[str, Any]:
    return (body.get("status") or {}).get("usage") or {}


def total_tokens(usage: dict[str, Any]) -> int:
    """Input (not from cache) + cached input + output: what a budget's maxTokens counts."""
    return sum(int(usage.get(k) or 0) for k in ("inputTokens", "cachedTokens", "outputTokens"))


def _condition(body: dict[str, Any], kind: str) -> dict[str, Any]:
    conditions = (body.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), {})


def budget_exhausted(body: dict[str, Any]) -> str | None:
    """The BudgetExhausted condition's message while it is True, else None."""
    found = _condition(body, BUDGET_CONDITION)
    if found.get("status") != "True":
        return None
    return str(found.get("message") or "a limit was reached")


def session_rows(bodies: list[dict[str, Any]]) -> list[list[str]]:
    """`get`: a header and one row per session; tokens and cost as the egress proxy metered them."""
    rows = [["NAME", "PHASE", "AGENT", "REQUESTS", "TOKENS", "COST", "BUDGET"]]
    for body in sorted(bodies, key=lambda b: b["metadata"]["name"]):
        usage = _usage(body)
        rows.append(
            [
                body["metadata"]["name"],
                str((body.get("status") or {}).get("phase") or "<none>"),  # as kubectl shows a missing field
                str(((body.get("spec") or {}).get("agent") or {}).get("type") or "demo"),
                str(int(usage.get("requests") or 0)),
                str(total_tokens(usage)),
                f"${usage.get('costUSD') or '0'}",
                "exhausted" if budget_exhausted(body) else "ok",
            ]
        )
    return rows


def table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def describe_session(body: dict[str, Any]) -> list[str]:
    """`status`: the phase, each condition, the usage and the budget, as lines."""
    meta, spec, status = body["metadata"], body.get("spec") or {}, body.get("status") or {}
    lines = [
        f"Name:       {meta['namespace']}/{meta['name']}",
        f"Agent:      {(spec.get('agent') or {}).get('type') or 'demo'}",
        f"Phase:      {status.get('phase') or 'unknown'}",
        "Conditions:",
    ]
    for c in status.get("conditions") or []:
        why = f" {c.get('reason')}" if c.get("reason") else ""
        said = f": {c.get('message')}" if c.get("message") else ""
        lines.append(f"  {c.get('type')}={c.get('status')}{why}{said}")
    usage = _usage(body)
    lines += [
        "Usage:",
        f"  Requests:       {int(usage.get('requests') or 0)}",
        f"  Input tokens:   {int(usage.get('inputTokens') or 0)} (not from cache)",
        f"  Cached tokens:  {int(usage.get('cachedTokens') or 0)}",
        f"  Output tokens:  {int(usage.get('outputTokens') or 0)}",
        f"  Tokens:         {total_tokens(usage)}",
        f"  Cost:           ${usage.get('costUSD') or '0'}",
    ]
    if usage.get("updatedTime"):
        lines.append(f"  Updated:        {usage['updatedTime']}")
    own = spec.get("budget") or {}
    limits = [f"{own[key]} {unit}" for key, unit in BUDGET_LIMITS if own.get(key) is not None]
    lines.append("Budget:")
    lines.append(
        f"  Limits:         {', '.join(limits)} (spec.budget; unset ones from the namespace or the chart)"
        if limits
        else "  Limits:         the namespace's or the chart's (spec.budget sets none)"
    )
    spent = budget_exhausted(body)
    lines.append(
        f"  Exhausted:      yes: {spent}; raise spec.budget to go on" if spent else "  Exhausted:      no"
    )
    return lines
