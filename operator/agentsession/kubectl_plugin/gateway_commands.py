"""The commands that talk to a session through the gateway: attach, prompt, history and shell."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agentsession.kubectl_plugin.client import Event, history_page, open_session, start_task
from agentsession.kubectl_plugin.conversation import Conversation
from agentsession.kubectl_plugin.credentials import Target
from agentsession.kubectl_plugin.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    GatewayError,
    PluginError,
    exit_status,
)
from agentsession.kubectl_plugin.render import Transcript, describe_update
from agentsession.kubectl_plugin.terminal import StdinPump, interrupts, raw_terminal, read_keys, read_line

ATTACH_HELP = (
    "Type a prompt and Enter. /cancel stops the turn, /mode ID changes the mode, /quit (or Ctrl-D) leaves."
)


async def run_prompt(target: Target, text: str, answer: str) -> int:
    inbox: asyncio.Queue[Event] = asyncio.Queue()
    transcript = Transcript(sys.stdout)
    with interrupts(inbox):
        async with open_session(target, inbox) as client:
            talk = Conversation(client, target.agent_id, transcript, answer)
            await talk.start()
            if answer == "ask":
                StdinPump(inbox, read_line)
            await client.request("session.prompt", task_id=target.agent_id, text=text)
            ours = False
            while True:
                kind, value = await inbox.get()
                if kind == "closed":
                    raise PluginError(f"{value} before the turn ended")
                if kind == "interrupt":
                    if value > 1:
                        transcript.end_paragraph()
                        return EXIT_INTERRUPTED
                    await talk.cancel_turn()
                elif kind == "input":
                    await (talk.end_of_input() if value is None else talk.answer_line(value))
                elif value["action"] == "session.update":
                    update = value["payload"]
                    notification = update.get("notification") or {}
                    # The turn is ours from the prompt the journal records for it; an earlier turn's end is not.
                    ours = ours or (
                        update["kind"] == "session_update"
                        and describe_update(notification)[0] == "user_message_chunk"
                    )
                    if not ours:
                        continue
                    await talk.on_update(update["kind"], notification)
                    if update["kind"] == "turn_end":
                        return exit_status(notification.get("stopReason"))
                elif value["action"] == "task.deleted":
                    raise PluginError(f"{target.agent_id} was deleted")


async def run_attach(target: Target, show_history: bool) -> int:
    inbox: asyncio.Queue[Event] = asyncio.Queue()
    transcript = Transcript(sys.stdout)
    with interrupts(inbox):
        async with open_session(target, inbox) as client:
            talk = Conversation(client, target.agent_id, transcript, "ask")
            started = await talk.start()
            info = started.get("info") or {}

            def show(entries: list[dict[str, Any]]) -> None:
                for entry in entries if show_history else []:
                    transcript.entry(entry["kind"], entry.get("notification") or {})
                if not talk.start_id:  # the whole history is shown: what follows is live
                    transcript.line(f"[attached to {target.agent_id}: {info.get('status')}; {ATTACH_HELP}]")

            show(started.get("updates") or [])
            StdinPump(inbox, read_line)
            leaving = False
            while True:
                kind, value = await inbox.get()
                if kind == "closed":
                    raise PluginError(str(value))
                if kind == "interrupt":
                    if talk.turn_running and value == 1:
                        await talk.cancel_turn()
                        continue
                    transcript.end_paragraph()
                    return 0
                if kind == "input":
                    if value is None:
                        # Ctrl-D (or the end of a script): leave once the running turn has ended.
                        await talk.end_of_input()
                        leaving = True
                    elif not await talk.answer_line(value) and await _command(talk, value.strip()):
                        return 0
                elif (page := talk.history_page(value)) is not None:
                    show(page)
                elif value["action"] == "session.update":
                    update = value["payload"]
                    await talk.on_update(update["kind"], update.get("notification") or {})
                elif value["action"] == "task.status":
                    status = value["payload"].get("status")
                    if status not in ("ready", "processing"):
                        transcript.line(f"[{target.agent_id} is {status}]")
                elif value["action"] == "task.deleted":
                    transcript.line(f"[{target.agent_id} was deleted]")
                    return EXIT_FAILED
                if leaving and not talk.turn_running and not talk.start_id:
                    return 0


async def _command(talk: Conversation, line: str) -> bool:
    """Runs one line typed in `attach`: a prompt or a /command. True when it asks to leave."""
    if not line:
        return False
    word, _, rest = line.partition(" ")
    try:
        if word in ("/quit", "/exit"):
            return True
        if word == "/cancel":
            await talk.cancel_turn()
        elif word == "/mode" and rest.strip():
            changed = await talk.client.request(
                "session.set_mode", task_id=talk.agent_id, mode_id=rest.strip()
            )
            talk.transcript.line(f"[mode: {changed.get('currentModeId')}]")
        elif word.startswith("/"):
            talk.transcript.line(f"[{ATTACH_HELP}]")
        else:
            await talk.client.request("session.prompt", task_id=talk.agent_id, text=line)
    except GatewayError as exc:
        talk.transcript.line(f"[{exc}]")
    return False


async def run_history(target: Target, output: str) -> int:
    inbox: asyncio.Queue[Event] = asyncio.Queue()
    transcript = Transcript(sys.stdout)

    def show(entries: list[dict[str, Any]]) -> None:
        for entry in entries:
            if output == "json":
                print(json.dumps(entry, sort_keys=True))
            else:
                transcript.entry(entry["kind"], entry.get("notification") or {})

    async with open_session(target, inbox) as client:
        started, request_id = await start_task(client, target.agent_id)
        show(started.get("updates") or [])
        more = started.get("next")
        # The pages after the first, each printed as it comes.
        while more is not None:
            kind, value = await inbox.get()
            if kind == "closed":
                raise PluginError(f"{value} before the whole history came")
            if kind == "notification" and (page := history_page(value, request_id)) is not None:
                show(page.get("updates") or [])
                more = page.get("next")
    transcript.end_paragraph()
    return 0


async def run_shell(target: Target) -> int:
    inbox: asyncio.Queue[Event] = asyncio.Queue()
    out = sys.stdout
    with interrupts(inbox):
        async with open_session(target, inbox) as client:
            await client.request("task.start", task_id=target.agent_id)
            subscribed = await client.request("shell.subscribe", task_id=target.agent_id)
            with raw_terminal():
                out.write(subscribed.get("buffer") or "")
                out.flush()
                StdinPump(inbox, read_keys())
                while True:
                    kind, value = await inbox.get()
                    if kind == "closed":
                        raise PluginError(str(value))
                    if kind == "interrupt":
                        return EXIT_INTERRUPTED
                    if kind == "input":
                        # The end of piped input ends the shell's input too, as Ctrl-D at its prompt would.
                        try:
                            await client.request("shell.input", task_id=target.agent_id, data=value or "\x04")
                        except GatewayError as exc:
                            # The shell may have ended first (its `exit` is on the way); say so and go on.
                            print(f"\r\n[input not delivered: {exc}]", file=sys.stderr)
                        continue
                    payload = value["payload"]
                    if value["action"] == "shell.output" and payload.get("type") == "output":
                        out.write(payload.get("data") or "")
                        out.flush()
                    elif value["action"] == "shell.output":
                        code = payload.get("code")
                        return int(code) if code is not None else 0
                    elif value["action"] == "task.deleted":
                        raise PluginError(f"{target.agent_id} was deleted")
