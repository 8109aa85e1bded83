"""The operator under tracemalloc, for the scale benchmark's `--trace-memory`: on SIGUSR1 it writes what is
allocated now, by file and by line, to the file its first argument names.

    python -m benchmarks.traced_operator OUT [operator arguments]
"""

from __future__ import annotations

import signal
import sys
import tracemalloc
from pathlib import Path
from types import FrameType

from agentsession.controller.main import main as operator_main

FRAMES = 12  # deep enough to see which handler's call made a dict the library then kept


def _write(out: Path) -> None:
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    total = sum(stat.size for stat in snapshot.statistics("filename"))
    lines = [f"traced now: {total / 2**20:.1f} MiB", "", "by file:"]
    lines += [f"  {stat}" for stat in snapshot.statistics("filename")[:25]]
    lines += ["", "by line:"]
    lines += [f"  {stat}" for stat in snapshot.statistics("lineno")[:40]]
    lines += ["", "by call stack:"]
    for stat in snapshot.statistics("traceback")[:15]:
        lines.append(f"  {stat.size / 2**20:.1f} MiB in {stat.count} blocks")
        lines += [f"    {line}" for line in stat.traceback.format(most_recent_first=True)]
    partial = out.with_suffix(".partial")
    partial.write_text("\n".join(lines) + "\n")
    partial.rename(out)


def main() -> int:
    out = Path(sys.argv.pop(1))
    tracemalloc.start(FRAMES)

    def dump(_signal: int, _frame: FrameType | None) -> None:
        _write(out)

    signal.signal(signal.SIGUSR1, dump)
    operator_main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
