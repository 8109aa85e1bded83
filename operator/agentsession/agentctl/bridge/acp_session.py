"""agentctl's calls to the agent, and the ACP session they open: initialize, session/new, session/load (a resume),
the session's mode, each call bounded in time and its failure turned into an `ApiError`.

When the agent asks for authentication before a session (ACP's AUTH_REQUIRED), the call is made again after
authenticating with the agent's API-key methods. MCP servers handed to the agent go into its session/new and
session/load here; a new client capability into CLIENT_CAPABILITIES, with its handler in `agent_requests`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from acp import PROTOCOL_VERSION, RequestError
from acp.client.connection import ClientSideConnection
from acp.schema import ClientCapabilities, FileSystemCapabilities, Implementation

from agentsession.agentctl import __version__
from agentsession.agentctl.bridge import log
from agentsession.agentctl.bridge.acp_state import dump
from agentsession.agentctl.bridge.attachment import Attachment
from agentsession.agentctl.bridge.context import BridgeContext
from agentsession.agentctl.bridge.intake import MessageIntake
from agentsession.agentctl.bridge.phases import ACP_INITIALIZED, IN_SESSION, Phase
from agentsession.agentctl.errors import ApiError, conflict, from_agent_error
from agentsession.api.acp import SESSION_ID_MAX_CHARS

T = TypeVar("T")

# ACP's "authentication required" error code.
AUTH_REQUIRED = -32000
# What agentctl offers the agent: no file system, no terminals (`agent_requests` answers what it does offer).
CLIENT_CAPABILITIES = ClientCapabilities(
    fs=FileSystemCapabilities(read_text_file=False, write_text_file=False), terminal=False
)
CLIENT_INFO = Implementation(name="agentctl", title="agentctl", version=__version__)


class AcpSession:
    def __init__(self, ctx: BridgeContext, attachment: Attachment, intake: MessageIntake) -> None:
        self._ctx = ctx
        self._phases, self._acp, self._store = ctx.phases, ctx.acp, ctx.store
        self._attachment = attachment
        self._intake = intake

    async def call(self, method: str, call: Awaitable[T], wait_s: float | None = None) -> T:
        """The agent's answer to `call`, within `wait_s` (default: the attach timeout)."""
        ended = self._attachment.ended
        try:
            return await asyncio.wait_for(
                call, wait_s if wait_s is not None else self._ctx.config.attach_timeout
            )
        except RequestError as exc:
            raise from_agent_error(method, exc) from exc
        except TimeoutError:
            raise ApiError(504, "agent_timeout", f"agent did not answer {method} in time") from None
        except ConnectionError as exc:
            # Not last_error: that may be an older, unrelated error, and the exit may not be recorded yet.
            reason = await self._attachment.why_lost(ended) or str(exc)
            raise ApiError(502, "agent_exited", f"agent connection lost during {method}: {reason}") from exc

    async def _authenticated(self, method: str, call: Callable[[], Awaitable[T]]) -> T:
        """Runs session/new or session/load; when the agent asks for authentication first (Codex does, unless
        its model provider is configured), authenticates with the API-key methods it offers, in its order (the
        keys are in its environment, from the session's credentials Secret), then runs the call again."""
        try:
            return await self.call(method, call())
        except ApiError as exc:
            if exc.details.get("agent_error_code") != AUTH_REQUIRED or not self._acp.key_auth_methods:
                raise
        conn = self.require_initialized()
        refused = []
        for method_id in self._acp.key_auth_methods:
            try:
                await self.call("authenticate", conn.authenticate(method_id=method_id))
            except ApiError as exc:
                refused.append(f"{method_id}: {exc.message}")
                continue
            log.info("authenticated with the agent's API-key method", extra={"method_id": method_id})
            return await self.call(method, call())
        raise ApiError(
            502,
            "agent_auth_required",
            f"the agent asks for authentication before {method} and refused each of its API-key methods "
            f"({'; '.join(refused)}): put the key it names in the Secret of spec.agent.credentialsSecretRef",
        )

    def require_initialized(self) -> ClientSideConnection:
        conn = self._attachment.require()
        if not self._phases.initialized:
            raise conflict("ACP is not initialized; call POST /api/v1/acp/initialize or /api/v1/start first")
        return conn

    def require_session(self, session_id: str | None) -> str:
        """The current session's id; a 409 without one, a 404 when `session_id` names another."""
        self._attachment.require()
        if self._phases.phase not in IN_SESSION:
            raise conflict("no ACP session yet; call POST /api/v1/start or /api/v1/acp/session/new first")
        assert self._acp.session_id is not None
        if session_id is not None and session_id != self._acp.session_id:
            raise ApiError(404, "not_found", f"session {session_id!r} is not the current session")
        return self._acp.session_id

    def _check_cwd(self, cwd: str | None) -> str:
        if cwd is None:
            return self._acp.cwd or self._store.record.cwd or str(self._ctx.config.workdir)
        path = Path(cwd)
        if not path.is_absolute() or "\x00" in cwd:
            raise ApiError(422, "validation_error", f"cwd must be an absolute path, got {cwd!r}")
        if not path.is_dir():
            raise ApiError(422, "validation_error", f"cwd {cwd!r} is not an existing directory")
        return cwd

    async def initialize(self, protocol_version: int = PROTOCOL_VERSION) -> dict[str, Any]:
        conn = await self._attachment.attach(self._ctx.config.attach_timeout)
        try:
            resp = await self.call(
                "initialize",
                conn.initialize(
                    protocol_version=protocol_version,
                    client_capabilities=CLIENT_CAPABILITIES,
                    client_info=CLIENT_INFO,
                ),
            )
        except ApiError as exc:
            self._ctx.errors.note(exc.message)
            # Not after an exit or a stop meanwhile, nor when a working connection is initialized again.
            if self._phases.phase is Phase.CONNECTED:
                self._phases.move(Phase.UNANSWERED)
            raise
        # Initialize again on an initialized connection leaves its session and turn as they are.
        if self._phases.phase not in ACP_INITIALIZED:
            self._phases.move(Phase.INITIALIZED)
        self._acp.protocol_version = resp.protocol_version
        answer = dump(resp)
        self._acp.set_identity(answer)
        return answer

    async def new_session(self, cwd: str | None) -> dict[str, Any]:
        conn = self.require_initialized()
        cwd = self._check_cwd(cwd)
        self._intake.replay = "off"
        resp = await self._authenticated("session/new", lambda: conn.new_session(cwd=cwd, mcp_servers=[]))
        if len(resp.session_id) > SESSION_ID_MAX_CHARS:
            raise ApiError(
                502,
                "agent_protocol",
                f"the agent named its new session with an id of {len(resp.session_id)} characters; agentctl "
                f"takes ids of at most {SESSION_ID_MAX_CHARS}",
            )
        self._opened()
        acp = self._acp
        acp.session_id, acp.cwd = resp.session_id, cwd
        acp.current_mode_id, acp.available_modes, acp.mode_config_id = None, [], None
        raw = dump(resp)
        acp.set_modes(raw.get("modes"), raw.get("configOptions"))
        self.remember(prompt_sent=False)
        return raw

    async def load_session(self, session_id: str, cwd: str | None) -> dict[str, Any]:
        conn = self.require_initialized()
        if not self._acp.load_session:
            raise ApiError(501, "agent_unsupported", "the agent does not support session/load")
        cwd = self._check_cwd(cwd)
        replaying = self._ctx.hub.journal.has_entries()
        self._intake.replay = "all" if replaying else "off"
        try:
            resp = await self._authenticated(
                "session/load", lambda: conn.load_session(cwd=cwd, session_id=session_id, mcp_servers=[])
            )
        except BaseException:
            self._intake.replay = "off"
            raise
        # Some agents (gemini-cli) stream the history after answering session/load: until the next turn, the
        # conversation's updates are still that replay.
        self._intake.replay = "conversation" if replaying else "off"
        self._opened()
        self._acp.session_id, self._acp.cwd = session_id, cwd
        raw = dump(resp) if resp is not None else {}
        self._acp.set_modes(raw.get("modes"), raw.get("configOptions"))
        if self._store.record.session_id != session_id:
            self.remember(prompt_sent=False)
        return raw

    def _opened(self) -> None:
        # A turn still running goes on; the new session is the one the next turn uses.
        if self._phases.phase is not Phase.TURN:
            self._phases.move(Phase.SESSION)

    def remember(self, prompt_sent: bool) -> None:
        """Keeps the session on the workspace, for a restarted agentctl to resume."""
        rec = self._store.record
        rec.session_id, rec.cwd, rec.prompt_sent = self._acp.session_id, self._acp.cwd, prompt_sent
        rec.mode_id = self._acp.current_mode_id
        self._store.save()

    async def set_mode(self, mode_id: str, session_id: str | None) -> str:
        sid = self.require_session(session_id)
        conn = self._attachment.require()
        acp = self._acp
        known = [m.get("id") for m in acp.available_modes]
        if known and mode_id not in known:
            raise ApiError(422, "validation_error", f"mode_id {mode_id!r} is not one of {known}")
        config_id = acp.mode_config_id
        if config_id is None:
            await self.call("session/set_mode", conn.set_session_mode(session_id=sid, mode_id=mode_id))
            acp.current_mode_id = mode_id
        else:
            resp = await self.call(
                "session/set_config_option",
                conn.set_config_option(config_id=config_id, session_id=sid, value=mode_id),
            )
            acp.current_mode_id = mode_id
            # The answer holds every option's value as the agent now has it.
            acp.set_modes(None, dump(resp).get("configOptions"))
        self._store.record.mode_id = mode_id
        self._store.save()
        return mode_id
