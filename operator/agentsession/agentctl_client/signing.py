"""The client's side of request signatures (`agentsession.contract.auth`): what each request to agentctl carries.

A signature names the agentctl instance it is for, which agentctl sends on every answer. The client learns it
from `GET /health` (open) the first time, keeps it per endpoint, and learns the new one from the refusal when
agentctl has restarted since; the caller then signs that one request again, once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Final

import aiohttp
from yarl import URL

from agentsession.contract.auth import INSTANCE_HEADER, authorization, valid_instance
from agentsession.contract.wire import HEALTH_PATH

# Endpoints whose instance one connector remembers: more than the pods one operator or gateway talks to at once.
INSTANCES_KEPT: Final = 16384


class Instances:
    """The instance each agentctl endpoint last named; the oldest forgotten beyond `limit`."""

    def __init__(self, limit: int = INSTANCES_KEPT) -> None:
        self._known: OrderedDict[str, str] = OrderedDict()
        self._limit = limit

    def get(self, endpoint: str) -> str | None:
        return self._known.get(endpoint)

    def learn(self, endpoint: str, instance: str | None) -> bool:
        """Records what an answer named; True when it differs from what was known (agentctl restarted)."""
        if instance is None or not valid_instance(instance) or self._known.get(endpoint) == instance:
            return False
        self._known[endpoint] = instance
        self._known.move_to_end(endpoint)
        while len(self._known) > self._limit:
            self._known.popitem(last=False)
        return True


class Signer:
    """Signs each request to one agentctl with its token; the token never leaves this object."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        endpoint: str,
        token: str,
        instances: Instances,
        timeout: aiohttp.ClientTimeout,
    ) -> None:
        self._http = http
        self._endpoint = endpoint
        self._token = token
        self._instances = instances
        self._timeout = timeout

    async def headers(self, method: str, url: str) -> dict[str, str]:
        """The Authorization header for `method url`; raises aiohttp's errors when agentctl cannot be asked
        for its instance."""
        instance = self._instances.get(self._endpoint) or await self._ask_instance()
        target = URL(url).raw_path_qs  # the request line as aiohttp sends it
        return {"Authorization": authorization(self._token, instance, method, target)}

    def renewed(self, status: int | None, headers: Mapping[str, str] | None) -> bool:
        """Whether a refusal came from another instance than the one signed for: worth signing once more."""
        if status != 401 or headers is None:
            return False
        return self._instances.learn(self._endpoint, headers.get(INSTANCE_HEADER))

    async def _ask_instance(self) -> str:
        # Only the header is read: the body of whatever answers there is not needed, whatever its size.
        async with self._http.get(self._endpoint + HEALTH_PATH, timeout=self._timeout) as response:
            named = response.headers.get(INSTANCE_HEADER)
        self._instances.learn(self._endpoint, named)
        # Without one (an agentctl serving without authentication), any instance does.
        return self._instances.get(self._endpoint) or "0"
