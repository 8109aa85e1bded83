"""Fixtures of the node tier (the operator itself is `node_operator` in tests/conftest.py)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.support.kube import Sessions


@pytest.fixture
def sessions(kube_api: Any, namespace: str) -> Sessions:
    return Sessions(kube_api, namespace)
