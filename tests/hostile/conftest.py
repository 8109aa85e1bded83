"""The hostile-tenant tier: each test sends what a hostile tenant or a hostile agent would (oversized answers,
floods, forged or broken journal lines, nested JSON, cross-site handshakes, junk tokens, revocation while
connected) against real processes, or real pods where a node is needed, and shows the bound holding: memory under
the container's limit (measured), the session still usable, and access ending when it should.

The fixtures of the component tier (real agentctl processes with the demo agent) are shared here.
"""

from __future__ import annotations

from tests.component.conftest import agentctl, fifo_agentctl, http, spawn

__all__ = ["agentctl", "fifo_agentctl", "http", "spawn"]
