"""docs/architecture.md names only modules and files that exist: every module (`controller/status_mapper.py`, a
package such as `kube/`, a glob such as `agentctl/routes_*.py`), test file and repository path in its code (inline
and in blocks) is there. A path resolves against the package (operator/agentsession), `operator/` (for
`agentsession/...`) or the repository's root; a bare name (`reconciler.py`, `api/`, where the text says whose it
is) must be a module or folder of the code somewhere."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO_ROOT

DOC = REPO_ROOT / "docs" / "architecture.md"
PACKAGE = REPO_ROOT / "operator" / "agentsession"
BASES = (PACKAGE, REPO_ROOT / "operator", REPO_ROOT)
# Where a bare name is looked for: the code and the tests, not build output.
CODE = (PACKAGE, REPO_ROOT / "tests", REPO_ROOT / "hack", REPO_ROOT / "benchmarks")
# A path whose first part is one of these names something of the repository, whatever it ends with.
ROOTS = {
    "agentsession",
    "benchmarks",
    "charts",
    "crds",
    "docs",
    "examples",
    "hack",
    "images",
    "operator",
    "tests",
}
# Folders of agentctl's volume the document describes, not of the repository.
NOT_CODE = {"state/", "home/"}
CODE_SPAN = re.compile(r"```[^\n]*\n(.*?)```|`([^`\n]+)`", re.DOTALL)
WORD = re.compile(r"[\w.*/-]+")
FOLDER = re.compile(r"(?:[a-z_][a-z0-9_]*/)+")


def code_words(text: str) -> list[str]:
    """The words of the document's code, inline and in blocks, in order."""
    return [
        word for match in CODE_SPAN.finditer(text) for word in WORD.findall(match.group(1) or match.group(2))
    ]


def named_paths(text: str) -> list[str]:
    """The words that name a module, a package or folder, a test file or a path of the repository."""
    named = []
    for word in code_words(text):
        path = word.split("::")[0].rstrip(".")  # a test's node id; the end of a sentence in a block
        if path.startswith(("/", ".")) or path in NOT_CODE:  # a path in a container or a hidden folder
            continue
        if path.endswith(".py") or FOLDER.fullmatch(path) or (path.split("/")[0] in ROOTS and "/" in path):
            named.append(path)
    return list(dict.fromkeys(named))


def exists(path: str) -> bool:
    pattern = path.rstrip("/")
    if "/" in pattern:
        return any(next(base.glob(pattern), None) is not None for base in BASES)
    candidates = [base / pattern for base in BASES] + [
        found for base in CODE for found in base.rglob(pattern)
    ]
    return any(
        found.exists() and "__pycache__" not in found.parts and (found.is_dir() or not path.endswith("/"))
        for found in candidates
    )


def test_every_module_and_test_file_the_architecture_names_exists() -> None:
    named = named_paths(DOC.read_text())
    assert len(named) > 50, "the document names the modules it describes"
    missing = [path for path in named if not exists(path)]
    assert not missing, f"docs/architecture.md names what is not there: {missing}"


@pytest.mark.parametrize(
    ("text", "paths"),
    [
        ("`controller/status_mapper.py` and `tests/unit/test_x.py::test_y`", ["controller/status_mapper.py",
                                                                              "tests/unit/test_x.py"]),
        ("```\n api/  │ models.py → crd.py\n```", ["api/", "models.py", "crd.py"]),
        ("`agentctl/routes_*.py`, `pytest -s tests/e2e`, `docs/gateway.md`", ["agentctl/routes_*.py", "tests/e2e",
                                                                              "docs/gateway.md"]),
        ("`/var/lib/agentctl`, `.agentsession/workspace`, `state/`, `session/load`, `agentsession.dev/x`, "
         "`https://`, `state.json`, `GET /health`", []),
        ("models.py outside code, `Reconciler._act`", []),
    ],
)  # fmt: skip
def test_the_names_read_are_those_of_modules_and_files(text: str, paths: list[str]) -> None:
    assert named_paths(text) == paths


@pytest.mark.parametrize(
    ("path", "found"),
    [
        ("controller/status_mapper.py", True),
        ("agentsession/api/views.py", True),
        ("agentctl/routes_*.py", True),
        ("tests/unit", True),
        ("reconciler.py", True),
        ("kube/", True),
        ("operator/", True),
        ("console/", True),  # the gateway's, named where the text is about the gateway
        ("controller/no_such_module.py", False),
        ("tests/unit/test_no_such_thing.py", False),
        ("no_such_module.py", False),
        ("no_such_package/", False),
        ("conftest.py/", False),  # a file is not a folder
    ],
)
def test_a_name_resolves_against_the_package_operator_or_the_repository(path: str, found: bool) -> None:
    assert exists(path) is found
