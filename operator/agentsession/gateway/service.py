"""Executes one decoded client command for one connection; dialect-free."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from agentsession.agentctl_client import AgentctlApi, AgentctlError
from agentsession.api.manifest import Key
from agentsession.api.views import SessionView
from agentsession.gateway import commands as c
from agentsession.gateway import metrics
from agentsession.gateway.agents import AgentRegistry, split_id
from agentsession.gateway.commands import Command
from agentsession.gateway.connection import Connection
from agentsession.gateway.events import (
    AgentctlReady,
    AgentUpdate,
    ErrorCode,
    Event,
    Failure,
    HistoryPage,
    Reply,
    RequestError,
)
from agentsession.gateway.status import budget_state
from agentsession.gateway.upstream import request_error

log = logging.getLogger(__name__)

# Commands that change or drive the agent need `update` on agentsessions; the others need `get`.
_MUTATING = {
    c.INITIALIZE,
    c.PROMPT,
    c.SET_MODE,
    c.CANCEL,
    c.SUSPEND,
    c.PERMISSION_RESPONSE,
    c.SHELL_SUBSCRIBE,
    c.SHELL_INPUT,
}


class Service:
    def __init__(self, registry: AgentRegistry) -> None:
        self.registry = registry

    async def handle(self, conn: Connection, cmd: Command) -> None:
        metrics.MESSAGES.labels("in", cmd.action).inc()
        try:
            if cmd.action == c.INITIALIZE:
                await self._initialize(conn, cmd)
                return
            payload = await self._answer(conn, cmd)
        except RequestError as exc:
            details = dict(exc.details)
            if cmd.agent_id and "agentId" not in details:
                details["agentId"] = cmd.agent_id
            conn.deliver(Failure(exc.code, exc.message, cmd.action, cmd.request_id, cmd.envelope_id, details))
            return
        except Exception:
            log.exception("request %s failed", cmd.action)
            conn.deliver(
                Failure(ErrorCode.INTERNAL_ERROR, "the gateway failed to handle this request; see its log",
                        cmd.action, cmd.request_id, cmd.envelope_id)
            )  # fmt: skip
            return
        after = payload.pop("_after", None)
        follow = payload.pop("_follow", [])
        conn.deliver(Reply(cmd.action, payload, cmd.request_id, cmd.envelope_id))
        if cmd.agent_id and after is not None:
            conn.release_updates(cmd.agent_id, after, follow)
        elif follow:
            for event in follow:
                conn.deliver(event)

    async def _key(self, conn: Connection, cmd: Command) -> Key:
        if cmd.agent_id is None:
            raise RequestError(ErrorCode.VALIDATION_ERROR, "this request needs an agent id")
        key = split_id(cmd.agent_id)
        # Not found and not allowed look the same, so a client cannot probe other namespaces.
        if not await conn.authorize_namespace(key[0]) or self.registry.cache.get(key) is None:
            raise RequestError(ErrorCode.NOT_FOUND, f"no AgentSession {cmd.agent_id} visible to you")
        if cmd.action in _MUTATING and not await conn.may_update(*key):
            raise RequestError(
                ErrorCode.FORBIDDEN,
                f"you may not update agentsession {key[1]} in namespace {key[0]} (RBAC verb 'update' is needed)",
            )
        return key

    async def _answer(self, conn: Connection, cmd: Command) -> dict[str, Any]:
        try:
            return await self._run(conn, cmd)
        except AgentctlError as exc:
            raise request_error(exc) from exc

    async def _initialize(self, conn: Connection, cmd: Command) -> None:
        """Starts the agent if need be, then sends its history a page at a time: the answer carries the first,
        `HistoryPage`s the others, each written to the client before the next is read from agentctl; then the
        client follows the agent live from where the history ended."""
        reg = self.registry
        key = await self._key(conn, cmd)
        agent = cmd.agent_id or ""
        try:
            await reg.start_and_wait(key)
            async with conn.history_stream(agent):
                client = await reg.ready_client(key)
                after: int | None = 0
                journal: str | None = None
                while after is not None:
                    # Updates from here on are held: those from before are in the journal, so in this page or later.
                    conn.hold_updates(agent)
                    written, after, journal = await self._history_page(conn, cmd, key, client, after, journal)
                    # One page at a time in this gateway's memory: the next is read once this one has left.
                    if not await written:
                        return  # the client left
        except AgentctlError as exc:
            metrics.INITIALIZATIONS.labels("failed").inc()
            raise request_error(exc) from exc
        except RequestError:
            metrics.INITIALIZATIONS.labels("failed").inc()
            raise
        metrics.INITIALIZATIONS.labels("ok").inc()

    async def _history_page(
        self, conn: Connection, cmd: Command, key: Key, client: AgentctlApi, after: int, journal: str | None
    ) -> tuple[asyncio.Future[bool], int | None, str]:
        """Reads the page after `after` and delivers it (the first, with no `journal` read yet, as the answer); the
        last one makes the client live. Answers when the page will have been written, the `after` of the next page
        (None after the last) and the journal read."""
        agent = cmd.agent_id or ""
        page = await client.history(after)
        if journal is not None and page.journal_id != journal:
            raise RequestError(
                ErrorCode.UPSTREAM_ERROR,
                f"the journal of {agent} was replaced while its history was being sent (a new workspace); "
                "initialize again",
            )
        more = page.next
        if more is not None and more <= after:
            # An agentctl that answers so would have the gateway read the same page for ever.
            raise RequestError(
                ErrorCode.UPSTREAM_ERROR, f"agentctl's history of {agent} did not go on after {after}"
            )
        follow: list[Event] = []
        if more is None:
            # Requests still waiting for an answer are announced again, so a late client can answer them.
            pending = (await client.permissions()).pending
            follow = [
                AgentUpdate(agent, 0, p.created_at, "permission_request", p.model_dump()) for p in pending
            ]
            # What the agent journaled meanwhile did not all fit in what is held: it is read from the journal.
            if conn.held_overflowed(agent):
                more = page.last_seq
        updates = [entry.model_dump() for entry in page.updates]
        event: Event
        if journal is None:
            payload = {"agentId": agent, "info": self.registry.info(key), "updates": updates, "next": more}
            event = Reply(cmd.action, payload, cmd.request_id, cmd.envelope_id)
        else:
            event = HistoryPage(cmd.action, agent, updates, more, cmd.request_id, cmd.envelope_id)
        written = conn.deliver_tracked(event)
        if more is None:
            # In the same step as the last page: nothing the client receives falls between the two.
            conn.release_updates(agent, page.last_seq, follow)
        return written, more, page.journal_id

    async def _run(self, conn: Connection, cmd: Command) -> dict[str, Any]:
        reg = self.registry
        if cmd.action == c.PING:
            return {}
        if cmd.action == c.LIST:
            namespaces = {o["metadata"]["namespace"] for o in reg.cache.items()}
            allowed = {ns for ns in namespaces if await conn.authorize_namespace(ns)}
            return {
                "agents": reg.infos(lambda ns: ns in allowed),
                "cluster": reg.cluster_states(lambda ns: ns in allowed),
            }
        key = await self._key(conn, cmd)
        agent = cmd.agent_id or ""
        if cmd.action == c.SUBSCRIBE:
            session = SessionView(reg.session(key))
            info = reg.info(key)
            ready = session.condition_true("AgentctlReady")
            reply: dict[str, Any] = {"success": True, "task_id": agent, "status": info["status"] if info else None,
                                     "agentctl_ready": ready}  # fmt: skip
            if not conn.streaming_history(agent):
                # Live from now on; while a history is being sent, its end makes the client live.
                reply["_after"] = 1 << 62
            if ready:
                # Subscribed after readiness: say so at once rather than leave the client waiting for it.
                reply["_follow"] = [AgentctlReady(agent, session.status.podUID)]
            return reply
        if cmd.action == "unsubscribe":
            conn.drop_updates(agent)
            return {"success": True, "task_id": agent}
        if cmd.action == c.PROMPT:
            body = reg.session(key)
            exhausted, why = budget_state(SessionView(body))
            if exhausted:
                # Refused here, before agentctl: the proxy would refuse the turn's first model call anyway.
                raise RequestError(
                    ErrorCode.BUDGET_EXHAUSTED,
                    f"{agent} has exhausted its budget ({why}); raise its spec.budget to go on",
                    agentId=agent,
                    usage=(body.get("status") or {}).get("usage"),
                )
            accepted = await (await reg.ready_client(key)).prompt(cmd.args["text"])
            return {"agentId": agent, "accepted": True, "sessionId": accepted.session_id}
        if cmd.action == c.SET_MODE:
            mode = await (await reg.ready_client(key)).set_mode(cmd.args["modeId"])
            return {"agentId": agent, "currentModeId": mode.current_mode_id}
        if cmd.action == c.CANCEL:
            cancelled = await (await reg.ready_client(key)).cancel()
            return {"agentId": agent, "turnRunning": cancelled.turn_running}
        if cmd.action == c.SUSPEND:
            await reg.suspend(key)
            return {"agentId": agent, "suspended": True}
        if cmd.action == c.PERMISSION_RESPONSE:
            answered = await (await reg.ready_client(key)).respond_permission(
                cmd.args["permissionId"], cmd.args.get("optionId"), cmd.args.get("cancelled", False)
            )
            return {"agentId": agent, "permissionId": cmd.args["permissionId"], "outcome": answered.outcome}
        if cmd.action == c.SHELL_STATUS:
            ready = SessionView(reg.session(key)).condition_true("AgentctlReady")
            shell = await (await reg.ready_client(key)).shell_status() if ready else None
            return {"task_id": agent, "agentctl_ready": ready, "running": bool(shell and shell.running),
                    "cwd": shell.cwd if shell else None, "exit_code": shell.exit_code if shell else None}  # fmt: skip
        if cmd.action == c.SHELL_SUBSCRIBE:
            buffer = await reg.shell_subscribe(key, conn)
            return {"success": True, "task_id": agent, "buffer": buffer}
        if cmd.action == c.SHELL_UNSUBSCRIBE:
            await reg.shell_unsubscribe(key, conn)
            return {"success": True, "task_id": agent}
        if cmd.action == c.SHELL_INPUT:
            await reg.shell_input(key, cmd.args["data"], conn)
            return {"success": True, "task_id": agent}
        raise RequestError(ErrorCode.UNKNOWN_ACTION, f"unsupported request {cmd.action!r}")
