"""A line chart as a standalone SVG document, in plain Python: one plot does not warrant a plotting library.

Pure: series in, text out. Axes start at zero on y (memory curves read honestly only from zero) and at the first
point on x; ticks fall on 1, 2 or 5 times a power of ten.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from xml.sax.saxutils import escape

Point = tuple[float, float]
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
WIDTH, HEIGHT = 760, 400
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 40, 92  # room for the y labels, the title, the x labels and the legend


def nice_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """About `count` round values covering [low, high]: steps of 1, 2 or 5 times a power of ten."""
    if high <= low:
        high = low + 1
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    ticks = [round(math.floor(low / step) * step, 10)]
    while ticks[-1] < high:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def _label(value: float) -> str:
    return f"{value:g}"


def line_chart(series: Mapping[str, Sequence[Point]], *, title: str, x_label: str, y_label: str) -> str:
    """An SVG line chart of each series (in the mapping's order), with axes, ticks, grid and a legend."""
    points = [p for line in series.values() for p in line]
    if not points:
        raise ValueError("line_chart needs at least one point")
    x_ticks = nice_ticks(min(x for x, _ in points), max(x for x, _ in points))
    y_ticks = nice_ticks(0.0, max(y for _, y in points) * 1.05)
    x0, x1, y1 = x_ticks[0], x_ticks[-1], y_ticks[-1]
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def sx(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * plot_w

    def sy(y: float) -> float:
        return TOP + plot_h - y / y1 * plot_h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="22" text-anchor="middle" font-size="15">{escape(title)}</text>',
    ]
    for x in x_ticks:
        out.append(
            f'<line x1="{sx(x):.1f}" y1="{TOP}" x2="{sx(x):.1f}" y2="{TOP + plot_h}" stroke="#e5e5e5"/>'
        )
        out.append(f'<text x="{sx(x):.1f}" y="{TOP + plot_h + 16}" text-anchor="middle">{_label(x)}</text>')
    for y in y_ticks:
        out.append(
            f'<line x1="{LEFT}" y1="{sy(y):.1f}" x2="{LEFT + plot_w}" y2="{sy(y):.1f}" stroke="#e5e5e5"/>'
        )
        out.append(f'<text x="{LEFT - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{_label(y)}</text>')
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#444"/>')
    out.append(
        f'<text x="{LEFT + plot_w / 2}" y="{TOP + plot_h + 34}" text-anchor="middle">{escape(x_label)}</text>'
    )
    out.append(
        f'<text transform="translate(16 {TOP + plot_h / 2}) rotate(-90)" text-anchor="middle">'
        f"{escape(y_label)}</text>"
    )
    for i, (name, line) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in sorted(line))
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{coords}"/>')
        lx = LEFT + (i % 3) * (plot_w / 3)
        ly = TOP + plot_h + 56 + (i // 3) * 18
        out.append(f'<line x1="{lx:.1f}" y1="{ly - 4}" x2="{lx + 22:.1f}" y2="{ly - 4}" stroke="{colour}" '
                   'stroke-width="3"/>')  # fmt: skip
        out.append(f'<text x="{lx + 28:.1f}" y="{ly}">{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
