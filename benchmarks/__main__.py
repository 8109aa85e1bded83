"""Run every benchmark module of this package (`python -m benchmarks`)."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def main() -> int:
    failures = 0
    for mod in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda m: m.name):
        if not mod.name.endswith("_bench"):
            continue
        print(f"== {mod.name}", flush=True)
        module = importlib.import_module(f"benchmarks.{mod.name}")
        result = module.main([])
        failures += 1 if result else 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
