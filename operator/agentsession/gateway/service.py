"""Executes one decoded client command for one connection; dialect-free: it answers typed replies
(`replies`), which each dialect encodes."""

from __future__ import annotations

import asyncio
import logging

from agentsession.agentctl_client import AgentctlApi, AgentctlError
from agentsession.api.manifest import Key
from agentsession.gateway import commands as c
from agentsession.gateway import metrics
from agentsession.gateway import replies as r
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
from agentsession.gateway.sessions import Session
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
# A seq past any journal's end: a client subscribed with no history to read is live from now on.
_NOW = 1 << 62


class Service:
    def __init__(self, registry: AgentRegistry) -> None:
        self.registry = registry

    async def handle(self, conn: Connection, cmd: Command) -> None:
        metrics.MESSAGES.labels("in", cmd.action).inc()
        try:
            if cmd.action == c.INITIALIZE:
                await self._initialize(conn, cmd)
            else:
                await self._answer(conn, cmd)
        except RequestError as exc:
            details = dict(exc.details)
            if cmd.agent_id and "agentId" not in details:
                details["agentId"] = cmd.agent_id
            conn.deliver(Failure(exc.code, exc.message, cmd.action, cmd.request_id, cmd.envelope_id, details))
        except Exception:
            log.exception("request %s failed", cmd.action)
            conn.deliver(
                Failure(ErrorCode.INTERNAL_ERROR, "the gateway failed to handle this request; see its log",
                        cmd.action, cmd.request_id, cmd.envelope_id)
            )  # fmt: skip

    def _reply(self, conn: Connection, cmd: Command, body: r.Answer) -> None:
        conn.deliver(Reply(cmd.action, body, cmd.request_id, cmd.envelope_id))

    async def _session(self, conn: Connection, cmd: Command) -> Session:
        """The session `cmd` names, once the client's access to it is known: asked once per request, and the
        version read after the last answer, which the whole request then reads."""
        if cmd.agent_id is None:
            raise RequestError(ErrorCode.VALIDATION_ERROR, "this request needs an agent id")
        key = split_id(cmd.agent_id)
        # Not found and not allowed look the same, so a client cannot probe other namespaces.
        if not await conn.authorize_namespace(key[0]) or self.registry.cache.session(key) is None:
            raise RequestError(ErrorCode.NOT_FOUND, f"no AgentSession {cmd.agent_id} visible to you")
        if cmd.action in _MUTATING and not await conn.may_update(*key):
            raise RequestError(
                ErrorCode.FORBIDDEN,
                f"you may not update agentsession {key[1]} in namespace {key[0]} (RBAC verb 'update' is needed)",
            )
        return self.registry.session(key)

    async def _answer(self, conn: Connection, cmd: Command) -> None:
        try:
            if cmd.action == c.SUBSCRIBE:
                await self._subscribe(conn, cmd)
            else:
                self._reply(conn, cmd, await self._run(conn, cmd))
        except AgentctlError as exc:
            raise request_error(exc) from exc

    async def _initialize(self, conn: Connection, cmd: Command) -> None:
        """Starts the agent if need be, then sends its history a page at a time: the answer carries the first,
        `HistoryPage`s the others, each written to the client before the next is read from agentctl; then the
        client follows the agent live from where the history ended."""
        reg = self.registry
        key = (await self._session(conn, cmd)).key
        agent = cmd.agent_id or ""
        try:
            await reg.lifecycle.start_and_wait(key)
            async with conn.history_stream(agent):
                client = await reg.links.ready_client(reg.session(key))
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
            session = self.registry.cache.session(key)
            info = self.registry.info(session) if session is not None else None
            event = Reply(
                cmd.action, r.Initialized(agent, info, updates, more), cmd.request_id, cmd.envelope_id
            )
        else:
            event = HistoryPage(cmd.action, agent, updates, more, cmd.request_id, cmd.envelope_id)
        written = conn.deliver_tracked(event)
        if more is None:
            # In the same step as the last page: nothing the client receives falls between the two.
            conn.release_updates(agent, page.last_seq, follow)
        return written, more, page.journal_id

    async def _subscribe(self, conn: Connection, cmd: Command) -> None:
        """Answers, then the client follows the agent: live from now on, unless a history being sent makes it
        live at its end; and told at once of an agentctl already ready rather than left waiting for it."""
        session = await self._session(conn, cmd)
        ready = session.agentctl_ready
        self._reply(conn, cmd, r.Subscribed(session.id, self.registry.info(session)["status"], ready))
        follow: list[Event] = [AgentctlReady(session.id, session.view.status.podUID)] if ready else []
        if not conn.streaming_history(session.id):
            conn.release_updates(session.id, _NOW, follow)
        else:
            for event in follow:
                conn.deliver(event)

    async def _run(self, conn: Connection, cmd: Command) -> r.Answer:
        reg = self.registry
        if cmd.action == c.PING:
            return r.Pong()
        if cmd.action == c.LIST:
            allowed = [ns for ns in reg.cache.namespaces() if await conn.authorize_namespace(ns)]
            return r.AgentList(*reg.snapshot(allowed))
        session = await self._session(conn, cmd)
        agent = session.id
        if cmd.action == "unsubscribe":
            conn.drop_updates(agent)
            return r.Done(agent)
        if cmd.action == c.PROMPT:
            exhausted, why = budget_state(session.view)
            if exhausted:
                # Refused here, before agentctl: the proxy would refuse the turn's first model call anyway.
                raise RequestError(
                    ErrorCode.BUDGET_EXHAUSTED,
                    f"{agent} has exhausted its budget ({why}); raise its spec.budget to go on",
                    agentId=agent,
                    usage=session.cluster["usage"],
                )
            accepted = await (await reg.links.ready_client(session)).prompt(cmd.args["text"])
            return r.Prompted(agent, accepted.session_id)
        if cmd.action == c.SET_MODE:
            mode = await (await reg.links.ready_client(session)).set_mode(cmd.args["modeId"])
            return r.ModeSet(agent, mode.current_mode_id)
        if cmd.action == c.CANCEL:
            cancelled = await (await reg.links.ready_client(session)).cancel()
            return r.Cancelled(agent, cancelled.turn_running)
        if cmd.action == c.SUSPEND:
            await reg.lifecycle.suspend(session)
            return r.Suspended(agent)
        if cmd.action == c.PERMISSION_RESPONSE:
            answered = await (await reg.links.ready_client(session)).respond_permission(
                cmd.args["permissionId"], cmd.args.get("optionId"), cmd.args.get("cancelled", False)
            )
            return r.PermissionAnswered(agent, cmd.args["permissionId"], answered.outcome)
        if cmd.action == c.SHELL_STATUS:
            ready = session.agentctl_ready
            shell = await (await reg.links.ready_client(session)).shell_status() if ready else None
            return r.ShellState(agent, ready, bool(shell and shell.running), shell.cwd if shell else None,
                                shell.exit_code if shell else None)  # fmt: skip
        if cmd.action == c.SHELL_SUBSCRIBE:
            return r.ShellSubscribed(agent, await reg.shells.subscribe(session, conn))
        if cmd.action == c.SHELL_UNSUBSCRIBE:
            await reg.shells.unsubscribe(session.key, conn)
            return r.Done(agent)
        if cmd.action == c.SHELL_INPUT:
            await reg.shells.send(session, cmd.args["data"], conn)
            return r.Done(agent)
        raise RequestError(ErrorCode.UNKNOWN_ACTION, f"unsupported request {cmd.action!r}")
