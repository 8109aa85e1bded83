"""The identity of one AgentSession object, as every builder and mapper needs it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentsession.api.constants import API_VERSION, KIND
from agentsession.api.manifest import Key


def owner_reference(kind: str, name: str, uid: str) -> dict[str, Any]:
    """The reference that makes an object of this API (`kind`, one of its kinds) the controlling owner of another:
    the garbage collector deletes the owned object after its owner, and the owner's deletion waits for it."""
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


@dataclass(frozen=True)
class SessionRef:
    namespace: str
    name: str
    uid: str
    generation: int = 0
    # The stem of the children's names: the session's name, or the claimed pool pod's (status.startup.member).
    stem: str = ""

    @property
    def children(self) -> str:
        return self.stem or self.name

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    def owner_reference(self) -> dict[str, Any]:
        return owner_reference(KIND, self.name, self.uid)

    def object_reference(self) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": self.name,
            "namespace": self.namespace,
            "uid": self.uid,
        }
