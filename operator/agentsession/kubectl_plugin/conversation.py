"""A session talked to, as `attach` and `prompt` do: the journal shown, whether a turn runs, and permission
requests answered (asked on stdin, or with the first option of a kind)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentsession.kubectl_plugin.client import TaskClient, history_page, start_task
from agentsession.kubectl_plugin.errors import GatewayError
from agentsession.kubectl_plugin.render import Transcript, describe_update


def choose_option(options: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    """The first permission option of a kind: "allow" matches allow_once and allow_always."""
    return next((o for o in options if str(o.get("kind", "")).startswith(kind)), None)


def parse_answer(line: str, options: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The option a typed answer names (its number, id or name), or None for a cancel; ValueError otherwise."""
    text = line.strip()
    if text.lower() in ("", "cancel"):
        return None
    if text.isdigit() and 1 <= int(text) <= len(options):
        return options[int(text) - 1]
    for option in options:
        if text.lower() in (str(option.get("optionId", "")).lower(), str(option.get("name", "")).lower()):
            return option
    raise ValueError(f"answer with 1-{len(options)}, an option id, or an empty line to cancel")


@dataclass
class Conversation:
    """What `attach` and `prompt` share: the journal shown, who is asked about permissions, whether a turn runs."""

    client: TaskClient
    agent_id: str
    transcript: Transcript
    answer: str  # ask | allow | reject | cancel
    turn_running: bool = False
    # Permission requests waiting for a typed answer, oldest first: pending id → options.
    asked: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    stdin_ended: bool = False
    start_id: str = ""  # the task.start whose history pages are still coming; "" once it has all come

    async def start(self) -> dict[str, Any]:
        started, request_id = await start_task(self.client, self.agent_id)
        self.turn_running = (started.get("info") or {}).get("status") == "processing"
        self.start_id = request_id if started.get("next") is not None else ""
        return started

    def history_page(self, notification: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The entries of a page of the history that came after `start`'s answer; None if it is not one."""
        page = history_page(notification, self.start_id) if self.start_id else None
        if page is None:
            return None
        if page.get("next") is None:
            self.start_id = ""
        return list(page.get("updates") or [])

    async def on_update(self, kind: str, notification: dict[str, Any]) -> None:
        self.transcript.entry(kind, notification)
        if kind == "session_update" and describe_update(notification)[0] == "user_message_chunk":
            self.turn_running = True
        elif kind == "turn_end":
            self.turn_running = False
        elif kind == "permission_request":
            await self._permission(notification)
        elif kind == "permission_resolved":
            self.asked.pop(str(notification.get("pending_id")), None)

    async def _permission(self, pending: dict[str, Any]) -> None:
        pending_id = str(pending.get("pending_id"))
        options = list(pending.get("options") or [])
        if self.answer == "ask" and not self.stdin_ended:
            self.asked[pending_id] = options
            self.transcript.line("answer: a number, an option id, or an empty line to cancel")
            return
        chosen = choose_option(options, self.answer) if self.answer in ("allow", "reject") else None
        await self._respond(pending_id, chosen)

    async def answer_line(self, line: str) -> bool:
        """Gives a typed line to the oldest permission request waiting; False when none was waiting."""
        if not self.asked:
            return False
        pending_id, options = next(iter(self.asked.items()))
        try:
            chosen = parse_answer(line, options)
        except ValueError as exc:
            self.transcript.line(str(exc))
            return True
        del self.asked[pending_id]
        await self._respond(pending_id, chosen)
        return True

    async def end_of_input(self) -> None:
        """No one is left to answer once stdin has ended: waiting requests, and later ones, are cancelled."""
        self.stdin_ended = True
        asked, self.asked = self.asked, {}
        for pending_id in asked:
            await self._respond(pending_id, None)

    async def _respond(self, pending_id: str, option: dict[str, Any] | None) -> None:
        answer: dict[str, Any] = {"option_id": option["optionId"]} if option else {"cancelled": True}
        try:
            await self.client.request(
                "permission.respond", task_id=self.agent_id, pending_id=pending_id, **answer
            )
        except GatewayError as exc:
            self.transcript.line(f"[{exc}]")

    async def cancel_turn(self) -> None:
        self.transcript.line("[cancelling the turn; Ctrl-C again to leave]")
        try:
            await self.client.request("session.cancel", task_id=self.agent_id)
        except GatewayError as exc:
            self.transcript.line(f"[{exc}]")
