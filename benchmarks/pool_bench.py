"""Warm pool benchmark: AgentSession create → Ready when it claims a warm pod, against a cold start in the same run.

Needs a cluster with a node and the project image (`make cluster-up image`); it starts its own operator process
watching only its own namespace, which it deletes at the end. Every instant is this process's monotonic clock when
its watch delivered the change, as in `startup_bench`.

    .venv/bin/python -m benchmarks.pool_bench            # --runs N (default 10), --burst N (default 5)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import time
from collections import defaultdict

from agentsession.api.constants import API_VERSION, KIND, POOL_KIND
from agentsession.kube.client import ApiKube, connect
from agentsession.kube.resources import AGENT_SESSIONS, PODS
from benchmarks.startup_bench import Seen, bench_namespace, kubectl, operator, percentile, row, watch

POOL = "bench-pool"


class PoolBench:
    def __init__(self, kube: ApiKube, namespace: str) -> None:
        self.kube = kube
        self.ns = namespace
        self.seen = Seen()
        self.results: dict[str, list[float]] = defaultdict(list)

    async def until_pool_ready(self, replicas: int) -> None:
        await asyncio.to_thread(
            kubectl, "wait", "-n", self.ns, "--timeout=180s",
            f"--for=jsonpath={{.status.readyReplicas}}={replicas}", f"agentsessionpool/{POOL}",
        )  # fmt: skip

    async def session(self, name: str, measure: str, *, pool: bool) -> None:
        spec: dict[str, object] = {"agent": {"type": "demo"}}
        if pool:
            spec["poolRef"] = {"name": POOL}
        created = time.monotonic()
        await self.kube.create(
            {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "metadata": {"name": name, "namespace": self.ns},
                "spec": spec,
            }
        )
        ready = await self.seen.wait(name, "Ready")
        self.results[measure].append(ready - created)
        session = await self.kube.get(AGENT_SESSIONS, self.ns, name)
        source = ((session.get("status") or {}).get("startup") or {}).get("source")
        self.results[f"{measure} [{source}]"].append(ready - created)
        # A node holds only so many pods: each measured session goes before the next.
        await self.kube.delete(AGENT_SESSIONS, self.ns, name)


async def run(runs: int, burst: int) -> PoolBench:
    kube = await connect(os.environ.get("KUBECONFIG"))
    namespace = await bench_namespace()
    bench = PoolBench(kube, namespace)
    watchers = [asyncio.create_task(watch(kube, r, namespace, bench.seen)) for r in (PODS, AGENT_SESSIONS)]
    try:
        with operator(os.environ.get("KUBECONFIG"), namespace):
            await kube.create(
                {"apiVersion": API_VERSION, "kind": POOL_KIND, "metadata": {"name": POOL, "namespace": namespace},
                 "spec": {"replicas": max(1, burst), "template": {"agent": {"type": "demo"}}}}
            )  # fmt: skip
            await bench.session("warm-up", "warm-up", pool=False)
            for i in range(runs):
                await bench.until_pool_ready(max(1, burst))
                await bench.session(f"claim-{i}", "sequential claim: create → Ready", pool=True)
                await bench.session(f"cold-{i}", "cold start: create → Ready", pool=False)
            await bench.until_pool_ready(burst)
            await asyncio.gather(
                *(bench.session(f"burst-{i}", f"burst of {burst} claims: create → Ready", pool=True)
                  for i in range(burst))
            )  # fmt: skip
    finally:
        for task in watchers:
            task.cancel()
        with contextlib.suppress(subprocess.CalledProcessError):
            await asyncio.to_thread(kubectl, "delete", "namespace", namespace, "--wait=false")
        await kube.close()
    bench.results.pop("warm-up", None)
    bench.results.pop("warm-up [Cold]", None)
    return bench


def report(bench: PoolBench, runs: int, burst: int) -> None:
    r = bench.results
    print(
        f"\n{runs} sequential claims interleaved with cold starts, then a burst of {burst} claims; seconds\n"
    )
    print("| measure | p50 | p90 | p99 | n |\n|---|---|---|---|---|")
    for name in sorted(r):
        print(row(name, r[name]))
    claim, cold = r.get("sequential claim: create → Ready"), r.get("cold start: create → Ready")
    if claim and cold:
        print(f"\nclaim against cold start, p50: {percentile(claim, 50) / percentile(cold, 50):.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="sequential claims (each with a cold start)")
    parser.add_argument(
        "--burst", type=int, default=5, help="sessions claiming at once, from a pool that size"
    )
    args = parser.parse_args(argv)
    bench = asyncio.run(run(args.runs, args.burst))
    report(bench, args.runs, args.burst)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
