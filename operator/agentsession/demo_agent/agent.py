"""The demo agent's behaviour. Everything it says follows from the prompt text, so tests can rely on it.

Cues in the prompt: "permission" asks the client for a permission to write demo.txt in the session's working
directory, and writes it when allowed; "__slow__" streams slowly (for cancel);
"__burst N__" (or "__burst N every Uus__") streams N timestamped chunks (for the benchmark); "__garbage__" prints a non-JSON line;
"__die__" exits in the middle of the turn; "__mode ID__" switches to mode ID on the agent's own account;
"__odd__" sends session updates that the ACP schema rejects, as a newer agent may.

With `modes_as_config_option` the agent offers its modes as a session config option of category "mode", set with
session/set_config_option, as Codex does, instead of as `modes` set with session/set_mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    Client,
    RequestError,
    start_tool_call,
    update_agent_message_text,
    update_agent_thought_text,
    update_tool_call,
    update_user_message_text,
)
from acp.helpers import text_block, tool_content, update_current_mode
from acp.schema import (
    AgentCapabilities,
    AuthenticateResponse,
    AuthEnvVar,
    ConfigOptionUpdate,
    EnvVarAuthMethod,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PermissionOption,
    PromptResponse,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionMode,
    SessionModeState,
    SessionNotification,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    ToolCallUpdate,
)

from agentsession.demo_agent.store import SessionFile, valid_session_id
from agentsession.tasks import Supervisor

MODES = (
    SessionMode(id="ask", name="Ask", description="Answer questions; ask before changing anything"),
    SessionMode(id="code", name="Code", description="Write code in the workspace"),
)
MODE_CONFIG_ID = "mode"
# What an allowed permission request writes.
DEMO_FILE = "demo.txt"
_MODE_CUE = re.compile(r"__mode ([A-Za-z0-9_-]+)__")
# Two of a kind the schema does not know, and a known kind with a field of the wrong type.
ODD_UPDATES = (
    {"sessionUpdate": "future_update", "detail": 1},
    {"sessionUpdate": "future_update", "detail": 2},
    {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": 42}},
)
_BURST = re.compile(r"__burst (\d{1,7})(?: every (\d{1,5})us)?__")


@dataclass
class Session:
    session_id: str
    cwd: str
    store: SessionFile
    mode: str = "ask"
    turns: int = 0
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)


class DemoAgent:
    def __init__(
        self,
        tick: float = 0.05,
        modes_as_config_option: bool = False,
        key_variable: str | None = None,
        replay_after_load: bool = False,
        forget_sessions: bool = False,
    ) -> None:
        self._tick = tick
        # Like gemini-cli at times: session/load fails with an internal error, as if nothing had been saved.
        self._forget_sessions = forget_sessions
        # Like gemini-cli: session/load answers at once and streams the history after its answer.
        self._replay_after_load = replay_after_load
        self._background = Supervisor("demo agent")
        self._modes_as_config_option = modes_as_config_option
        # Like Codex without a configured provider: sessions need an `authenticate` with this API-key variable.
        self._key_variable = key_variable
        self._authenticated = key_variable is None
        self._client: Client | None = None
        self._sessions: dict[str, Session] = {}

    def on_connect(self, conn: Client) -> None:
        self._client = conn

    @property
    def client(self) -> Client:
        assert self._client is not None
        return self._client

    def _mode_state(self, session: Session) -> dict[str, Any]:
        """The session's modes as the keyword arguments of a session/new or session/load answer."""
        if self._modes_as_config_option:
            return {"config_options": self._config_options(session)}
        return {"modes": SessionModeState(current_mode_id=session.mode, available_modes=list(MODES))}

    @staticmethod
    def _config_options(session: Session) -> list[Any]:
        values = [
            SessionConfigSelectOption(value=m.id, name=m.name, description=m.description) for m in MODES
        ]
        return [
            SessionConfigOptionSelect(
                id=MODE_CONFIG_ID,
                name="Mode",
                category="mode",
                type="select",
                current_value=session.mode,
                options=values,
            )
        ]

    async def _switch_mode(self, session: Session, mode_id: str) -> None:
        if mode_id not in {m.id for m in MODES}:
            raise RequestError.invalid_params({"modeId": f"unknown mode {mode_id!r}"})
        session.mode = mode_id
        if self._modes_as_config_option:
            update: Any = ConfigOptionUpdate(
                session_update="config_option_update", config_options=self._config_options(session)
            )
        else:
            update = update_current_mode(mode_id)
        await self._say(session, update)

    def _session(self, session_id: str) -> Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise RequestError.resource_not_found(session_id)
        return session

    @staticmethod
    def _check_cwd(cwd: str) -> None:
        if not os.path.isabs(cwd) or not os.path.isdir(cwd):
            raise RequestError.invalid_params({"cwd": f"not an existing absolute directory: {cwd!r}"})

    async def _say(self, session: Session, update: Any) -> None:
        session.store.append(update.model_dump(mode="json", by_alias=True, exclude_none=True))
        await self.client.session_update(session_id=session.session_id, update=update)

    # ----- ACP agent methods -----

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(load_session=True),
            agent_info=Implementation(name="agentsession-demo-agent", title="Demo agent", version="0.1.0"),
            auth_methods=self._auth_methods(),
        )

    def _auth_methods(self) -> list[Any]:
        if self._key_variable is None:
            return []
        # A method whose variable is never set comes first, so a client must try the agent's methods in turn.
        return [
            EnvVarAuthMethod(type="env_var", id=method_id, name=variable, vars=[AuthEnvVar(name=variable)])
            for method_id, variable in (
                ("unset-key", f"{self._key_variable}_UNSET"),
                ("key", self._key_variable),
            )
        ]

    async def authenticate(self, method_id: str, **kwargs: Any) -> AuthenticateResponse:
        variable = {m.id: m.vars[0].name for m in self._auth_methods()}.get(method_id)
        if variable is None or not os.environ.get(variable):
            raise RequestError.auth_required({"methodId": method_id, "reason": f"{variable} is not set"})
        self._authenticated = True
        return AuthenticateResponse()

    def _require_authentication(self) -> None:
        if not self._authenticated:
            raise RequestError.auth_required()

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        self._require_authentication()
        self._check_cwd(cwd)
        session_id = f"demo-{uuid.uuid4().hex[:16]}"
        session = Session(session_id, cwd, SessionFile(cwd, session_id))
        session.store.create()
        self._sessions[session_id] = session
        return NewSessionResponse(session_id=session_id, **self._mode_state(session))

    async def load_session(self, cwd: str, session_id: str, **kwargs: Any) -> LoadSessionResponse:
        self._require_authentication()
        self._check_cwd(cwd)
        store = SessionFile(cwd, session_id)
        if self._forget_sessions:
            raise RequestError.internal_error({"details": "No previous sessions found for this project."})
        if not valid_session_id(session_id) or not store.exists():
            raise RequestError.resource_not_found(session_id)
        session = Session(session_id, cwd, store)
        replay = []
        for raw in store.updates():
            update = SessionNotification.model_validate({"sessionId": session_id, "update": raw}).update
            if raw.get("sessionUpdate") == "current_mode_update":
                session.mode = raw["currentModeId"]
            if raw.get("sessionUpdate") == "config_option_update":
                session.mode = next(
                    o["currentValue"] for o in raw["configOptions"] if o["id"] == MODE_CONFIG_ID
                )
            if raw.get("sessionUpdate") == "user_message_chunk":
                session.turns += 1
            replay.append(update)
        self._sessions[session_id] = session
        if self._replay_after_load:
            self._background.spawn(self._replay(session_id, replay), f"replay {session_id}")
        else:
            await self._replay(session_id, replay)
        return LoadSessionResponse(**self._mode_state(session))

    async def _replay(self, session_id: str, updates: list[Any]) -> None:
        if self._replay_after_load:
            # Let the answer to session/load go out first.
            await asyncio.sleep(0.05)
        for update in updates:
            await self.client.session_update(session_id=session_id, update=update)

    async def set_session_mode(self, session_id: str, mode_id: str, **kwargs: Any) -> SetSessionModeResponse:
        # An agent offers its modes one way: a client that picks the other one is wrong.
        if self._modes_as_config_option:
            raise RequestError.method_not_found("session/set_mode")
        await self._switch_mode(self._session(session_id), mode_id)
        return SetSessionModeResponse()

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> SetSessionConfigOptionResponse:
        if not self._modes_as_config_option:
            raise RequestError.method_not_found("session/set_config_option")
        session = self._session(session_id)
        if config_id != MODE_CONFIG_ID or not isinstance(value, str):
            raise RequestError.invalid_params({"configId": f"no select option {config_id!r}"})
        await self._switch_mode(session, value)
        return SetSessionConfigOptionResponse(config_options=self._config_options(session))

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self._sessions.get(session_id)
        if session is not None:
            session.cancelled.set()

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        session = self._session(session_id)
        session.cancelled.clear()
        session.turns += 1
        text = " ".join(
            getattr(block, "text", "") for block in prompt if getattr(block, "type", "") == "text"
        )
        session.store.append(
            update_user_message_text(text).model_dump(mode="json", by_alias=True, exclude_none=True)
        )
        burst = _BURST.search(text)
        if burst:
            pause = int(burst.group(2) or 0) / 1e6
            for i in range(int(burst.group(1))):
                await self.client.session_update(
                    session_id=session_id, update=update_agent_message_text(f"burst {i} {time.time_ns()}")
                )
                if pause:
                    await asyncio.sleep(pause)
            return PromptResponse(stop_reason="end_turn")
        await self._say(session, update_agent_thought_text(f"Turn {session.turns} in {session.mode} mode."))
        if cue := _MODE_CUE.search(text):
            await self._switch_mode(session, cue.group(1))
        if "__die__" in text:
            await self._say(session, update_agent_message_text("Exiting in the middle of the turn."))
            os.write(2, b"demo agent: exiting with code 3 on __die__\n")
            os._exit(3)
        if "__odd__" in text:
            # Written past the SDK, which would refuse to send them.
            for odd in ODD_UPDATES:
                line = {
                    "jsonrpc": "2.0",
                    "method": "session/update",
                    "params": {"sessionId": session_id, "update": odd},
                }
                os.write(1, json.dumps(line).encode() + b"\n")
        if "__garbage__" in text:
            os.write(1, b"this line is not JSON-RPC\n")
        call_id = f"call-{session.turns}"
        await self._say(session, start_tool_call(call_id, "List workspace", kind="read", status="pending"))
        await self._say(session, update_tool_call(call_id, status="in_progress"))
        notes: list[str] = []
        if "permission" in text.lower():
            outcome = await self._ask_permission(session, call_id)
            if session.cancelled.is_set():
                await self._say(session, update_tool_call(call_id, status="failed"))
                return PromptResponse(stop_reason="cancelled")
            notes.append(f"Permission outcome: {outcome}.")
        entries = [name for name in os.listdir(session.cwd) if not name.startswith(".")]
        summary = f"{len(entries)} entries in the workspace"
        await self._say(
            session,
            update_tool_call(call_id, status="completed", content=[tool_content(text_block(summary))]),
        )
        words = [*notes, "You", "said:", *text.split()]
        for word in words:
            if session.cancelled.is_set():
                return PromptResponse(stop_reason="cancelled")
            await self._say(session, update_agent_message_text(word + " "))
            if "__slow__" in text:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(session.cancelled.wait(), self._tick)
        return PromptResponse(stop_reason="end_turn")

    async def _ask_permission(self, session: Session, call_id: str) -> str:
        options = [
            PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
            PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
        ]
        tool_call = ToolCallUpdate(
            tool_call_id=call_id, title=f"Write {DEMO_FILE}", kind="edit", status="pending"
        )
        resp = await self.client.request_permission(
            session_id=session.session_id, tool_call=tool_call, options=options
        )
        outcome = resp.outcome
        if getattr(outcome, "outcome", "") != "selected":
            return "cancelled"
        if outcome.option_id == "allow":
            text = f"Written by the demo agent in turn {session.turns}.\n"
            await asyncio.to_thread(Path(session.cwd, DEMO_FILE).write_text, text)
        return f"selected {outcome.option_id}"
