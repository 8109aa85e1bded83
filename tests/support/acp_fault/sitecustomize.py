"""Fault injection for the hostile-tenant tier: a test puts this directory first on an agentctl's PYTHONPATH, and
the ACP SDK's receive loop of that agentctl fails on a request of the method LOOP_KILLER, the way it would fail on
any bug of its own. No input agentctl accepts makes the loop fail any more; this stands in for what nobody knows
of yet, so a test can show what agentctl does when the loop has failed.

The SDK is patched when it is first imported (agentctl loads it in the background, after it listens).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any

LOOP_KILLER = "_test/kill_receive_loop"
TARGET = "acp.connection"


def _patch(module: ModuleType) -> None:
    connection = module.Connection
    original = connection._process_message

    def process_message(self: Any, message: dict[str, Any]) -> None:
        if message.get("method") == LOOP_KILLER:
            raise RuntimeError("injected failure of the receive loop")
        original(self, message)

    connection._process_message = process_message


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


sys.meta_path.insert(0, _Finder())
