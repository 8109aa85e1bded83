"""A Kubernetes object as the API serves it: plain JSON (camelCase), as read from and written to the wire."""

from typing import Any

Manifest = dict[str, Any]
# An object by its namespace and name, as caches, queues and indexes key it.
Key = tuple[str, str]
