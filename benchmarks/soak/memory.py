"""Memory samples of a soak run: the rows of its CSV, the curves of its plot, and the figures of its report.

The driver reads /proc and hands the samples in; only `CsvLog` writes. The operator and the gateway are one process each for the
whole run; an agentctl lives as long as its pod, a minute or so, so agentctl is reported as the mean and the
maximum over the pods alive at each sample.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

MIB = 1024 * 1024
Point = tuple[float, float]


@dataclass(frozen=True)
class Sample:
    at: float  # seconds into the run
    process: str  # operator | gateway | agentctl
    subject: str  # the process's pid, or for agentctl the session and its pod
    rss_bytes: int


@dataclass(frozen=True)
class Figures:
    start_mib: float
    end_mib: float
    max_mib: float
    slope_mib_per_hour: float  # least squares over the whole run
    late_slope_mib_per_hour: float  # over its second half, past the warm-up (imports, caches, first pods)


class CsvLog:
    """The samples as CSV, appended as they come: a run cut short keeps what it measured."""

    HEADER = ("seconds", "process", "subject", "rss_mib")

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as out:
            csv.writer(out).writerow(self.HEADER)

    def append(self, samples: Iterable[Sample]) -> None:
        with self.path.open("a", newline="") as out:
            writer = csv.writer(out)
            for s in samples:
                writer.writerow([f"{s.at:.1f}", s.process, s.subject, f"{s.rss_bytes / MIB:.2f}"])


def curves(samples: Iterable[Sample]) -> dict[str, list[Point]]:
    """Per process, (minutes, MiB) over the run; agentctl as its mean and maximum over the pods of a sample."""
    single: dict[str, list[Point]] = defaultdict(list)
    agentctl: dict[float, list[float]] = defaultdict(list)
    for s in samples:
        if s.process == "agentctl":
            agentctl[s.at].append(s.rss_bytes / MIB)
        else:
            single[s.process].append((s.at / 60, s.rss_bytes / MIB))
    result = dict(single)
    if agentctl:
        moments = sorted(agentctl)
        result["agentctl (mean of live pods)"] = [
            (t / 60, sum(agentctl[t]) / len(agentctl[t])) for t in moments
        ]
        result["agentctl (max of live pods)"] = [(t / 60, max(agentctl[t])) for t in moments]
    return result


def slope_per_hour(points: Sequence[Point]) -> float:
    """Least-squares slope of (minutes, MiB) points, in MiB per hour; 0 with fewer than two moments."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread == 0:
        return 0.0
    return 60 * sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


def figures(points: Sequence[Point]) -> Figures:
    ordered = sorted(points)
    half = ordered[0][0] + (ordered[-1][0] - ordered[0][0]) / 2
    return Figures(
        start_mib=ordered[0][1],
        end_mib=ordered[-1][1],
        max_mib=max(y for _, y in ordered),
        slope_mib_per_hour=slope_per_hour(ordered),
        late_slope_mib_per_hour=slope_per_hour([p for p in ordered if p[0] >= half]),
    )
