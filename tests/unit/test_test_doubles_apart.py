"""The test doubles live in `agentsession.testing`, and no product module imports them: a fake reached from the
product would run in production in place of the API server or agentctl it stands in for."""

from __future__ import annotations

import ast
from pathlib import Path

import agentsession

PACKAGE = Path(agentsession.__file__).parent
TESTING = "agentsession.testing"


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_no_product_module_imports_a_test_double() -> None:
    product = [p for p in PACKAGE.rglob("*.py") if (PACKAGE / "testing") not in p.parents]
    assert len(product) > 50, "the product's modules were not found"
    offenders = {
        str(p.relative_to(PACKAGE)): sorted(m for m in imported_modules(p) if m.startswith(TESTING))
        for p in product
    }
    assert {path: mods for path, mods in offenders.items() if mods} == {}


def test_the_fakes_are_in_the_testing_package() -> None:
    assert {p.name for p in (PACKAGE / "testing").glob("fake_*.py")} == {"fake_kube.py", "fake_agentctl.py"}
    assert not (PACKAGE / "kube" / "fake.py").exists()
    assert not (PACKAGE / "agentctl_client" / "fake.py").exists()
