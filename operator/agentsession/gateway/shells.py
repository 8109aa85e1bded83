"""The workspace shell of each session, shared by the clients that watch it: one shell stream to agentctl while any
client watches, its output fanned out to all of them, their input queued in one bounded queue."""

from __future__ import annotations

import time
from dataclasses import dataclass

from agentsession.api.manifest import Key, Manifest
from agentsession.gateway.codec import utf8_size
from agentsession.gateway.events import ErrorCode, RequestError, ShellOutput
from agentsession.gateway.fanout import Subscriber
from agentsession.gateway.live import AgentLinks
from agentsession.gateway.sessions import Session
from agentsession.gateway.status import agent_id
from agentsession.gateway.upstream import SHELL_INPUT_BYTES, SHELL_QUEUE_BYTES, ShellStream
from agentsession.tasks import Supervisor


@dataclass(eq=False)
class _Shell:
    stream: ShellStream
    watchers: set[Subscriber]


class Shells:
    def __init__(
        self,
        links: AgentLinks,
        tasks: Supervisor,
        *,
        input_bytes: int = SHELL_INPUT_BYTES,
        queue_bytes: int = SHELL_QUEUE_BYTES,
    ) -> None:
        self._links = links
        self._tasks = tasks
        self.input_bytes = input_bytes
        self.queue_bytes = queue_bytes
        self._shells: dict[Key, _Shell] = {}

    async def subscribe(self, session: Session, sub: Subscriber) -> str:
        """`sub` watches the shell of `session` from now on; answers what the shell printed so far."""
        client = await self._links.ready_client(session)
        shell = self._shells.get(session.key)
        if shell is None:
            key = session.key
            watchers: set[Subscriber] = set()
            stream = ShellStream(
                client, lambda frame: self._on_frame(key, watchers, frame), queue_bytes=self.queue_bytes
            )
            shell = self._shells[key] = _Shell(stream, watchers)
            try:
                await stream.start()
            except TimeoutError:
                await stream.stop()
                self._shells.pop(key, None)
                raise RequestError(ErrorCode.UPSTREAM_ERROR, "agentctl's shell stream did not open") from None
        shell.watchers.add(sub)
        return (await client.shell_buffer()).buffer

    async def unsubscribe(self, key: Key, sub: Subscriber) -> None:
        shell = self._shells.get(key)
        if shell is None:
            return
        shell.watchers.discard(sub)
        shell.stream.release(sub)
        if not shell.watchers:
            del self._shells[key]
            await shell.stream.stop()

    async def send(self, session: Session, data: str, sender: Subscriber) -> None:
        size = utf8_size(data)
        if size > self.input_bytes:
            raise RequestError(
                ErrorCode.VALIDATION_ERROR,
                f"shell input of {size} bytes is longer than the {self.input_bytes} one message may "
                "carry; send it in pieces, one after the other",
                field="data",
            )
        await self._links.ready_client(session)
        shell = self._shells.get(session.key)
        if shell is None:
            raise RequestError(ErrorCode.CONFLICT, "subscribe to the shell before sending input")
        await shell.stream.send_input(data, sender)

    async def stop(self, key: Key) -> None:
        """The session's agentctl is gone: its shell ends for every watcher."""
        shell = self._shells.pop(key, None)
        if shell is None:
            return
        await shell.stream.stop()
        watchers = list(shell.watchers)
        shell.watchers.clear()
        for sub in watchers:
            sub.deliver(ShellOutput(agent_id(*key), "exit", "", None, time.monotonic()))

    @staticmethod
    def _on_frame(key: Key, watchers: set[Subscriber], frame: Manifest) -> None:
        event = ShellOutput(
            agent_id(*key),
            str(frame.get("type")),
            str(frame.get("data") or ""),
            frame.get("code"),
            time.monotonic(),
        )
        for sub in list(watchers):
            sub.deliver(event)

    def of(self, sub: Subscriber) -> list[Key]:
        """The sessions whose shell `sub` watches."""
        return [key for key, shell in self._shells.items() if sub in shell.watchers]

    def forget(self, sub: Subscriber) -> None:
        for key in self.of(sub):
            self._tasks.spawn(self.unsubscribe(key, sub), f"leave the shell of {agent_id(*key)}")

    async def close(self) -> None:
        for shell in list(self._shells.values()):
            await shell.stream.stop()
