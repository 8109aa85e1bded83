"""What a soak run reports and draws: memory figures (slopes in MiB per hour), the CSV, and the SVG chart."""

from __future__ import annotations

import csv
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from benchmarks.soak.chart import BOTTOM, HEIGHT, LEFT, RIGHT, TOP, WIDTH, line_chart, nice_ticks
from benchmarks.soak.memory import MIB, CsvLog, Sample, curves, figures, slope_per_hour

SVG = "{http://www.w3.org/2000/svg}"


def test_a_steady_growth_of_one_mib_a_minute_is_sixty_an_hour() -> None:
    assert slope_per_hour([(m, 100 + m) for m in range(10)]) == pytest.approx(60.0)
    assert slope_per_hour([(m, 50.0) for m in range(10)]) == 0.0
    assert slope_per_hour([(0, 1.0)]) == 0.0
    assert slope_per_hour([(3, 1.0), (3, 9.0)]) == 0.0


def test_figures_separate_the_warm_up_from_the_second_half() -> None:
    # Climbs 10 MiB in the first 10 minutes (imports, caches), then flat for 10.
    points = [(float(m), 100.0 + min(m, 10)) for m in range(21)]
    f = figures(points)
    assert (f.start_mib, f.end_mib, f.max_mib) == (100.0, 110.0, 110.0)
    assert f.slope_mib_per_hour > 20
    assert f.late_slope_mib_per_hour == 0.0


def test_curves_keep_single_processes_and_summarize_the_agentctls_of_each_moment() -> None:
    samples = [
        Sample(0, "operator", "1", 100 * MIB),
        Sample(0, "agentctl", "a/10", 40 * MIB),
        Sample(0, "agentctl", "b/11", 60 * MIB),
        Sample(60, "operator", "1", 101 * MIB),
        Sample(60, "agentctl", "c/12", 50 * MIB),
    ]
    result = curves(samples)
    assert result["operator"] == [(0.0, 100.0), (1.0, 101.0)]
    assert result["agentctl (mean of live pods)"] == [(0.0, 50.0), (1.0, 50.0)]
    assert result["agentctl (max of live pods)"] == [(0.0, 60.0), (1.0, 50.0)]


def test_the_csv_grows_by_one_row_per_sample_in_mib(tmp_path: Path) -> None:
    path = tmp_path / "out" / "memory.csv"
    log = CsvLog(path)
    assert list(csv.reader(path.open())) == [["seconds", "process", "subject", "rss_mib"]]
    log.append([Sample(1.25, "gateway", "7", 3 * MIB // 2)])
    log.append([Sample(10.0, "operator", "8", 100 * MIB)])
    rows = list(csv.reader(path.open()))
    assert rows[1:] == [["1.2", "gateway", "7", "1.50"], ["10.0", "operator", "8", "100.00"]]


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (0, 2.2, [0, 0.5, 1, 1.5, 2, 2.5]),
        (0, 120, [0, 20, 40, 60, 80, 100, 120]),
        (3, 3, [3, 3.2, 3.4, 3.6, 3.8, 4]),
    ],
)
def test_ticks_are_round_and_cover_the_range(low: float, high: float, expected: list[float]) -> None:
    assert nice_ticks(low, high) == expected


def test_the_chart_draws_each_series_inside_the_plot_with_a_legend() -> None:
    series = {
        "operator": [(0.0, 100.0), (2.2, 112.0)],
        "gateway <ws>": [(0.0, 80.0), (1.1, 85.0), (2.2, 90.0)],
    }
    svg = line_chart(series, title="t", x_label="minutes", y_label="MiB")
    root = ET.fromstring(svg)
    lines = root.findall(f"{SVG}polyline")
    assert len(lines) == 2
    for line in lines:
        for pair in line.attrib["points"].split():
            x, y = map(float, pair.split(","))
            assert LEFT <= x <= WIDTH - RIGHT
            assert TOP <= y <= HEIGHT - BOTTOM
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "operator" in texts
    assert "gateway <ws>" in texts  # escaped in the document, whole in the text
    # The highest point sits below the top of the plot: y starts at zero and reaches past the maximum.
    ys = [float(p.split(",")[1]) for line in lines for p in line.attrib["points"].split()]
    assert min(ys) > TOP
    assert re.search(r">0</text>", svg)


def test_a_chart_of_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one point"):
        line_chart({"operator": []}, title="t", x_label="x", y_label="y")
