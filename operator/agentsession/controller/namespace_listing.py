"""Makes kopf take namespaces from every listing of its namespace watch, not only from watch events.

kopf (1.45) lists namespaces once, then starts a watch that lists them again and ignores that second listing,
as it ignores the listing after each watch restart (410 Gone). A namespace created between a listing and the
watch that follows it arrives in the ignored listing and in no event, so kopf never serves it although it
matches a pattern in `AGENTSESSION_NAMESPACES`. Treating those listings like the first one closes the gap;
adding a namespace kopf already serves changes nothing.
"""

from __future__ import annotations

from typing import Any

from kopf._cogs.structs import bodies
from kopf._core.reactor import observation

_process_namespace_event = observation.process_discovered_namespace_event


async def _process_namespace_event_or_listing(*, raw_event: bodies.RawEvent, **kwargs: Any) -> None:
    if raw_event["type"] is None:
        # A listed namespace counts as added: revise_namespaces() reads a deletion from the object itself.
        raw_event = {"type": "ADDED", "object": raw_event["object"]}
    await _process_namespace_event(raw_event=raw_event, **kwargs)


def install() -> None:
    # namespace_observer() looks the processor up by name when it starts, so this must run before kopf.run().
    observation.process_discovered_namespace_event = _process_namespace_event_or_listing
