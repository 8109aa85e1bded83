"""A Prometheus registry of a program's own, carrying the process's memory, CPU, file descriptors and Python's GC
as the operator exports them on the default registry; a registry of its own, since tests start several programs
in one process."""

from __future__ import annotations

from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR, CollectorRegistry


def process_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)
    return registry
