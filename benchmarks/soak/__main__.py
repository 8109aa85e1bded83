"""Soak: churn AgentSessions on a real node through a real gateway; fail on any invariant violation.

    .venv/bin/python -m benchmarks.soak --minutes 30          # --sessions K, --seed S, --sample-seconds N

Needs the local cluster and the project image (`make cluster-up image`), `kubectl` on PATH and KUBECONFIG set.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path

from benchmarks.soak import report
from benchmarks.soak.driver import SoakConfig, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long new cycles start (default 30)")
    parser.add_argument("--sessions", type=int, default=6, help="sessions alive at most (default 6)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the order and timing of the steps")
    parser.add_argument("--sample-seconds", type=float, default=10.0, help="memory sampling period")
    parser.add_argument("--out", type=Path, default=Path("build/soak"), help="logs and memory.csv")
    parser.add_argument("--plot", type=Path, default=None, help="write the memory plot (SVG) here")
    parser.add_argument("--image", default=os.environ.get("AGENTSESSION_IMAGE", "agentsession:dev"))
    args = parser.parse_args(argv)
    kubeconfig = os.environ.get("KUBECONFIG")
    if not kubeconfig:
        parser.error("set KUBECONFIG (`make cluster-kubeconfig` prints the local cluster's)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    config = SoakConfig(
        kubeconfig=kubeconfig,
        minutes=args.minutes,
        sessions=args.sessions,
        seed=args.seed,
        sample_seconds=args.sample_seconds,
        image=args.image,
        out_dir=args.out,
    )
    result = asyncio.run(run(config))
    if args.plot:
        report.plot(result, args.plot)
    print(report.summary(result))
    print(f"\nsamples: {args.out / 'memory.csv'}; logs: {args.out}/operator.log, {args.out}/gateway.log")
    if args.plot:
        print(f"plot: {args.plot}")
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())
