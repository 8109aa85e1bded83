"""One release key for every operator and gateway the tests and benchmarks start, so that they derive the same
agentctl tokens, and tests can compute the token of any session themselves (`token_of`)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from agentsession.contract.auth import TokenDeriver

KEY = b"agentsession-tests-release-key-not-secret-0123456789"
token_of = TokenDeriver(KEY)


def key_file() -> Path:
    """The key in a file, as the chart mounts it; written once, atomically (test runs may start at once)."""
    path = Path(tempfile.gettempdir()) / f"agentsession-tests-{os.getuid()}" / "agentctl-key"
    if not path.is_file() or path.read_bytes() != KEY:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        fd, partial = tempfile.mkstemp(dir=path.parent)
        with os.fdopen(fd, "wb") as out:
            out.write(KEY)
        os.replace(partial, path)
    return path
