"""The mutation score per module and in total, from the results `mutmut run` left in its mutants/ folder.

mutmut 3 keeps one JSON file per mutated source file, `mutants/<path>.meta`, whose `exit_code_by_key` maps each
mutant to the exit code of the tests run against it (None while not yet run). A mutant counts as killed when the
tests noticed it: they failed, ran out of time, or crashed. It counts against the score when they passed, when no
test reaches its function, or when it was never run; mutants mutmut was told to skip count neither way.

Usage: mutation_score.py [--min PERCENT] [--survivors] MUTANTS_DIR
Exits 1 when the total is under PERCENT (default 85), 2 when the folder holds no results.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# mutmut's own reading of its exit codes (mutmut/stats.py): pytest's 1 (tests failed) and 3 (internal error);
# mutmut's 36 and the SIGXCPU/SIGKILL codes of a mutant that overran its CPU budget or crashed the run;
# 37 caught by the type checker. 0 survived, 5 and 33 no tests, None not run yet, 34 skipped.
KILLED_CODES = frozenset({1, 3, 36, 24, -24, 152, 255, 37, -9, -11})
SKIPPED_CODES = frozenset({34})


def is_killed(exit_code: int | None) -> bool:
    return exit_code in KILLED_CODES


def is_skipped(exit_code: int | None) -> bool:
    return exit_code in SKIPPED_CODES


@dataclass
class Tally:
    killed: int = 0
    total: int = 0
    undetected: list[str] = field(default_factory=list)

    def add(self, mutant: str, exit_code: int | None) -> None:
        if is_skipped(exit_code):
            return
        self.total += 1
        if is_killed(exit_code):
            self.killed += 1
        else:
            self.undetected.append(mutant)

    @property
    def percent(self) -> float | None:
        return None if self.total == 0 else 100.0 * self.killed / self.total

    def reaches(self, minimum: float) -> bool:
        # Compared in integers where it matters: 17 of 20 is exactly 85%, not a hair under it.
        return self.killed * 100 >= minimum * self.total


def tally(results: Mapping[str, Mapping[str, int | None]]) -> tuple[dict[str, Tally], Tally]:
    """Per module (as named by the caller) and over all of them."""
    modules: dict[str, Tally] = {}
    total = Tally()
    for module, exit_codes in sorted(results.items()):
        counted = modules.setdefault(module, Tally())
        for mutant, exit_code in sorted(exit_codes.items()):
            counted.add(mutant, exit_code)
            total.add(mutant, exit_code)
    return modules, total


def read_results(mutants_dir: Path) -> dict[str, dict[str, int | None]]:
    """Each mutated file's results, keyed by the source path relative to the folder mutmut ran in."""
    results: dict[str, dict[str, int | None]] = {}
    for meta in sorted(mutants_dir.rglob("*.py.meta")):
        data = json.loads(meta.read_text())
        results[str(meta.relative_to(mutants_dir).with_suffix(""))] = dict(data["exit_code_by_key"])
    return results


def format_row(name: str, counted: Tally, width: int) -> str:
    percent = counted.percent
    score = "no mutants" if percent is None else f"{percent:5.1f}%"
    return f"{name:<{width}}  {counted.killed:>5}/{counted.total:<5}  {score}"


def report(modules: Mapping[str, Tally], total: Tally) -> list[str]:
    width = max([len("total"), *(len(name) for name in modules)])
    lines = [f"{'module':<{width}}  killed/total  score"]
    lines += [format_row(name, counted, width) for name, counted in modules.items()]
    lines.append(format_row("total", total, width))
    return lines


def survivor_lines(modules: Mapping[str, Tally]) -> Iterable[str]:
    for counted in modules.values():
        yield from counted.undetected


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mutants_dir", type=Path)
    parser.add_argument("--min", type=float, default=85.0, help="lowest total score that passes, in percent")
    parser.add_argument("--survivors", action="store_true", help="also list the mutants the tests missed")
    args = parser.parse_args(argv)
    results = read_results(args.mutants_dir)
    if not results:
        print(f"no mutmut results under {args.mutants_dir}: run `make mutation` first", file=sys.stderr)
        return 2
    modules, total = tally(results)
    print("\n".join(report(modules, total)))
    if args.survivors:
        print("\n".join(survivor_lines(modules)))
    if not total.reaches(args.min):
        print(f"mutation score {total.percent:.1f}% is under the minimum of {args.min:g}%", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
