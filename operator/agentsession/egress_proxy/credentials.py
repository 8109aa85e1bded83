"""The sessions' credentials Secrets, read when a call needs them and kept a short while (bounded, oldest out).

Only the values the proxy puts in are kept, never logged; a Secret that changes is seen within the cache time.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from agentsession.kube.client import Kube
from agentsession.kube.errors import KubeError, NotFound
from agentsession.kube.resources import SECRETS

GIT_TOKEN_KEY: Final = "GIT_TOKEN"
# A missing Secret is asked for again this soon, so a Secret created late is picked up quickly.
MISSING_SECONDS: Final = 2.0


class CredentialError(Exception):
    """The Secret cannot be read; the message names it (and what to do), never a value."""


@dataclass(frozen=True, slots=True)
class _Cached:
    data: dict[str, str]
    until: float


Clock = Callable[[], float]


class SecretCache:
    def __init__(self, kube: Kube, *, ttl: float, size: int, clock: Clock = time.monotonic) -> None:
        self._kube = kube
        self._ttl = ttl
        self._size = size
        self._clock = clock
        self._cache: OrderedDict[tuple[str, str], _Cached] = OrderedDict()
        self._loading: dict[tuple[str, str], asyncio.Future[_Cached]] = {}

    async def value(self, namespace: str, name: str, key: str) -> str | None:
        """The Secret's `key`, or None when the Secret lacks it; CredentialError when the Secret is unreadable."""
        cached = await self._get(namespace, name)
        return cached.data.get(key)

    async def _get(self, namespace: str, name: str) -> _Cached:
        key = (namespace, name)
        found = self._cache.get(key)
        if found is not None and found.until > self._clock():
            self._cache.move_to_end(key)
            return found
        loading = self._loading.get(key)
        if loading is None:
            # One read per Secret however many calls wait for it.
            loading = asyncio.ensure_future(self._load(namespace, name))
            self._loading[key] = loading
            loading.add_done_callback(lambda _: self._loading.pop(key, None))
        return await asyncio.shield(loading)

    async def _load(self, namespace: str, name: str) -> _Cached:
        reading: Awaitable[dict[str, object]] = self._kube.get(SECRETS, namespace, name)
        try:
            secret = await reading
        except NotFound:
            entry = _Cached({}, self._clock() + min(self._ttl, MISSING_SECONDS))
            self._store((namespace, name), entry)
            return entry
        except KubeError as error:
            raise CredentialError(
                f"the credentials Secret {namespace}/{name} could not be read ({error.status or 'no answer'})"
            ) from None
        raw = secret.get("data") or {}
        data = {}
        if isinstance(raw, dict):
            for item, encoded in raw.items():
                try:
                    data[str(item)] = base64.b64decode(str(encoded)).decode().strip()
                except (ValueError, UnicodeDecodeError):
                    continue
        entry = _Cached(data, self._clock() + self._ttl)
        self._store((namespace, name), entry)
        return entry

    def _store(self, key: tuple[str, str], entry: _Cached) -> None:
        self._cache[key] = entry
        self._cache.move_to_end(key)
        while len(self._cache) > self._size:
            self._cache.popitem(last=False)
