"""hack/mutation_score.py: what counts as killed, the per-module and total arithmetic, and the floor it enforces."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "mutation_score.py"


def _load() -> ModuleType:
    # hack/ is a folder of scripts, not a package: load the file the Makefile runs.
    spec = importlib.util.spec_from_file_location("mutation_score", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


score = _load()


@pytest.mark.parametrize(
    ("exit_code", "killed", "skipped"),
    [
        (1, True, False),  # a test failed
        (3, True, False),  # pytest itself broke on the mutant
        (36, True, False),  # out of time
        (-24, True, False),  # SIGXCPU: over the CPU budget
        (-9, True, False),  # killed after overrunning it
        (37, True, False),  # the type checker caught it
        (0, False, False),  # every test passed
        (33, False, False),  # no test reaches the function
        (5, False, False),
        (None, False, False),  # never run
        (35, False, False),  # suspicious: an exit code mutmut does not know
        (34, False, True),  # skipped on purpose
    ],
)
def test_exit_codes_read_as_killed_survived_or_skipped(
    exit_code: int | None, killed: bool, skipped: bool
) -> None:
    assert score.is_killed(exit_code) is killed
    assert score.is_skipped(exit_code) is skipped


def test_totals_add_up_per_module_and_overall() -> None:
    modules, total = score.tally(
        {
            "pkg/b.py": {"b.x_f__mutmut_1": 1, "b.x_f__mutmut_2": 0, "b.x_f__mutmut_3": 34},
            "pkg/a.py": {"a.x_g__mutmut_2": None, "a.x_g__mutmut_1": 36},
            "pkg/empty.py": {},
        }
    )
    assert list(modules) == ["pkg/a.py", "pkg/b.py", "pkg/empty.py"]
    assert [(t.killed, t.total, t.undetected) for t in modules.values()] == [
        (1, 2, ["a.x_g__mutmut_2"]),
        (1, 2, ["b.x_f__mutmut_2"]),
        (0, 0, []),
    ]
    assert (total.killed, total.total) == (2, 4)
    assert total.percent == 50.0
    assert modules["pkg/empty.py"].percent is None


@pytest.mark.parametrize(
    ("killed", "total", "minimum", "passes"),
    [
        (17, 20, 85, True),  # exactly the floor
        (16, 20, 85, False),
        (85, 100, 85.5, False),
        (171, 200, 85.5, True),
        (0, 0, 85, True),  # nothing to kill fails nothing
    ],
)
def test_the_floor_is_inclusive(killed: int, total: int, minimum: float, passes: bool) -> None:
    assert score.Tally(killed=killed, total=total).reaches(minimum) is passes


def _write_meta(root: Path, source: str, exit_codes: Mapping[str, int | None]) -> None:
    meta = root / f"{source}.meta"
    meta.parent.mkdir(parents=True, exist_ok=True)
    meta.write_text(json.dumps({"exit_code_by_key": exit_codes, "durations_by_key": {}}))


def test_report_prints_a_line_per_module_and_the_total(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_meta(
        tmp_path,
        "pkg/core.py",
        {f"pkg.core.x_f__mutmut_{i}": 1 for i in range(9)} | {"pkg.core.x_f__mutmut_9": 0},
    )
    _write_meta(tmp_path, "pkg/sub/io.py", {"pkg.sub.io.x_g__mutmut_1": 1})
    assert score.main([str(tmp_path), "--min", "85", "--survivors"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split() for line in out] == [
        ["module", "killed/total", "score"],
        ["pkg/core.py", "9/10", "90.0%"],
        ["pkg/sub/io.py", "1/1", "100.0%"],
        ["total", "10/11", "90.9%"],
        ["pkg.core.x_f__mutmut_9"],
    ]


def test_a_total_under_the_floor_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write_meta(tmp_path, "pkg/core.py", {"pkg.core.x_f__mutmut_1": 1, "pkg.core.x_f__mutmut_2": 0})
    assert score.main([str(tmp_path), "--min", "85"]) == 1
    assert "50.0% is under the minimum of 85%" in capsys.readouterr().err


def test_no_results_is_an_error_not_a_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert score.main([str(tmp_path)]) == 2
    assert "run `make mutation` first" in capsys.readouterr().err
