"""What the operator and the gateway do with the API beyond single verbs: create-or-read, Events, tokens."""

from __future__ import annotations

import base64
import logging
import time

from agentsession.api.constants import TOKEN_KEY
from agentsession.api.manifest import Manifest
from agentsession.api.times import utc_now
from agentsession.kube.client import Kube
from agentsession.kube.errors import Conflict, KubeError, NotFound
from agentsession.kube.resources import resource_of

log = logging.getLogger(__name__)
EVENT_MESSAGE_LIMIT = 1024


async def create_or_read(kube: Kube, manifest: Manifest) -> tuple[Manifest, bool]:
    """Creates the object, or returns the one of that name that exists: (object, created)."""
    try:
        return await kube.create(manifest), True
    except Conflict as error:
        if not error.already_exists:
            raise
    meta = manifest["metadata"]
    try:
        return await kube.get(resource_of(manifest), meta.get("namespace"), meta["name"]), False
    except NotFound as error:
        # Deleted between the two calls: the next reconcile creates it again.
        raise KubeError(f"{manifest['kind']} {meta.get('namespace')}/{meta['name']} vanished as it was read; "
                        "will retry", kind=manifest["kind"]) from error  # fmt: skip


def event_manifest(
    involved: Manifest, event_type: str, reason: str, message: str, component: str
) -> Manifest:
    now = utc_now("auto")
    # Named like client-go's recorder (name.<unix nanoseconds in hex>): timestamps keep only seconds, and the
    # name keeps a session's events in the order they happened.
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{involved['name']}.{time.time_ns():x}", "namespace": involved["namespace"]},
        "involvedObject": involved,
        "type": event_type,
        "reason": reason,
        "message": message[:EVENT_MESSAGE_LIMIT],
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


async def post_event(
    kube: Kube, involved: Manifest, event_type: str, reason: str, message: str, component: str
) -> None:
    """Best effort: losing an Event must not fail the work it reports on."""
    try:
        await kube.create(event_manifest(involved, event_type, reason, message, component))
    except KubeError as error:
        log.warning("posting event %s for %s failed: %s", reason, involved["name"], error)


def decode_token(secret: Manifest) -> str:
    return base64.b64decode((secret.get("data") or {}).get(TOKEN_KEY, "")).decode()
