"""What a soak run shows at its end: its figures as text, and its memory curves as an SVG plot."""

from __future__ import annotations

from pathlib import Path

from benchmarks.soak.chart import line_chart
from benchmarks.soak.driver import OUTAGE_GRACE, SoakResult
from benchmarks.soak.memory import curves, figures


def summary(result: SoakResult) -> str:
    lines = [
        f"minutes run: {result.seconds / 60:.1f} (namespace {result.namespace})",
        f"sessions churned: {result.cycles} whole cycles, {result.failed_cycles} cut short"
        f" ({len(result.cut_short)} of them by an API server outage)",
        f"prompts through the gateway: {result.prompts}",
        f"invariant violations: {len(result.violations)}",
        *(f"  {v.line()}" for v in result.violations[:50]),
    ]
    if len(result.violations) > 50:
        lines.append(f"  ... and {len(result.violations) - 50} more")
    if result.outages:
        away = ", ".join(f"at {at:.0f}s for {lasted:.0f}s" for at, lasted in result.outages)
        lines.append(
            f"API server outages (the invariants' clocks stopped, then {OUTAGE_GRACE:.0f}s of grace): {away}"
        )
    if result.longest:
        lasted = ", ".join(f"{rule} {seconds:.0f}s" for rule, seconds in sorted(result.longest.items()))
        lines.append(f"longest a checked condition was bad (each within its bound unless reported): {lasted}")
    if result.load:
        loads = [load for _, load in result.load]
        lines.append(
            f"load average (1 min) over the run: mean {sum(loads) / len(loads):.1f}, max {max(loads):.1f}"
        )
    lines += [
        "",
        "| process | start | end | max | slope, whole run | slope, second half |",
        "|---|---|---|---|---|---|",
    ]
    for name, points in curves(result.samples).items():
        f = figures(points)
        lines.append(
            f"| {name} | {f.start_mib:.1f} MiB | {f.end_mib:.1f} MiB | {f.max_mib:.1f} MiB "
            f"| {f.slope_mib_per_hour:+.1f} MiB/h | {f.late_slope_mib_per_hour:+.1f} MiB/h |"
        )
    return "\n".join(lines)


def plot(result: SoakResult, path: Path) -> None:
    """The memory curves of the run as an SVG line chart."""
    if result.samples:
        minutes = result.seconds / 60
        svg = line_chart(
            curves(result.samples),
            title=f"Resident memory over a {minutes:.0f}-minute soak ({result.cycles} sessions churned)",
            x_label="minutes into the run",
            y_label="RSS (MiB)",
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(svg)
