"""Makes kopf take namespaces from every listing of its namespace watch, not only from watch events.

kopf (1.45) lists namespaces once, then starts a watch that lists them again and ignores that second listing,
as it ignores the listing after each watch restart (410 Gone). A namespace created between a listing and the
watch that follows it arrives in the ignored listing and in no event, so kopf never serves it although it
matches a pattern in `AGENTSESSION_NAMESPACES`. Treating those listings like the first one closes the gap;
adding a namespace kopf already serves changes nothing.
"""

from __future__ import annotations

from typing import Any

from kopf._cogs.structs import bodies, references
from kopf._core.reactor import observation

_process_namespace_event = observation.process_discovered_namespace_event


async def _process_namespace_event_or_listing(
    *,
    raw_event: bodies.RawEvent,
    namespaces: Any,
    insights: references.Insights,
    **kwargs: Any,
) -> None:
    if raw_event["type"] is None:
        async with insights.revised:
            observation.revise_namespaces(
                raw_bodies=[raw_event["object"]], insights=insights, namespaces=namespaces
            )
            insights.revised.notify_all()
        return
    await _process_namespace_event(raw_event=raw_event, namespaces=namespaces, insights=insights, **kwargs)


def install() -> None:
    # namespace_observer() looks the processor up by name when it starts, so this must run before kopf.run().
    observation.process_discovered_namespace_event = _process_namespace_event_or_listing
