"""The terminal: what stdin gives and Ctrl-C become inbox events, and keys go through raw to a remote shell."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
import sys
import termios
import threading
import tty
from collections.abc import Callable, Iterator

from agentsession.kubectl_plugin.client import Event


class StdinPump:
    """Puts what stdin gives into the inbox as ("input", text), and ("input", None) at its end.

    A daemon thread reads, so a read that blocks never holds up the exit.
    """

    def __init__(self, inbox: asyncio.Queue[Event], read: Callable[[], str]) -> None:
        loop = asyncio.get_running_loop()

        def pump() -> None:
            while True:
                try:
                    text = read()
                except (OSError, ValueError):
                    text = ""
                loop.call_soon_threadsafe(inbox.put_nowait, ("input", text or None))
                if not text:
                    return

        threading.Thread(target=pump, name="stdin", daemon=True).start()


def read_line() -> str:
    return sys.stdin.readline()


def read_keys() -> Callable[[], str]:
    """Bytes as they are typed, decoded as UTF-8 across reads."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    fd = sys.stdin.fileno()

    def read() -> str:
        while True:
            data = os.read(fd, 4096)
            if not data:
                return ""
            if text := decoder.decode(data):
                return text

    return read


@contextlib.contextmanager
def interrupts(inbox: asyncio.Queue[Event]) -> Iterator[None]:
    """Ctrl-C becomes an ("interrupt", count) event instead of a KeyboardInterrupt; SIGTERM counts as a second one
    (leave now), so the port-forward is stopped on the way out."""
    loop = asyncio.get_running_loop()
    count = 0

    def on_signal(leave: bool) -> None:
        nonlocal count
        count = max(count + 1, 2 if leave else 1)
        inbox.put_nowait(("interrupt", count))

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig == signal.SIGTERM)
    try:
        yield
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


@contextlib.contextmanager
def raw_terminal() -> Iterator[None]:
    """Keys go to the remote shell as typed (Ctrl-C too) while a terminal is attached; restored afterwards."""
    if not sys.stdin.isatty():
        yield
        return
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
