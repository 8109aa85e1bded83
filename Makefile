# Every target runs from a fresh clone: the virtualenv is made on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv test unit lint typecheck cluster-up cluster-down cluster-kubeconfig image agent-images demo bench crd

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check operator tests benchmarks
	$(VENV)/bin/ruff format --check operator tests benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy

# All tests: unit, component (real processes), integration and e2e (a real cluster; see hack/cluster).
# tests/agents runs the real adapters that `make agent-images` installed on this host.
test: $(STAMP) lint typecheck
	AGENTSESSION_AGENTS_NPM_DIR="$${AGENTSESSION_AGENTS_NPM_DIR:-$$(hack/image/build-agents.sh --print-npm-dir 2>/dev/null)}" \
	  $(PY) -m pytest -p no:cacheprovider -ra $(PYTEST_ARGS)

unit: $(STAMP)
	$(PY) -m pytest -p no:cacheprovider -ra tests/unit $(PYTEST_ARGS)

# Regenerates crds/agentsessions.yaml from the pydantic models.
crd: $(STAMP)
	$(PY) -m agentsession.api.crd > crds/agentsessions.yaml

cluster-up:
	hack/cluster/up.sh

cluster-down:
	hack/cluster/down.sh

cluster-kubeconfig:
	@hack/cluster/kubeconfig.sh

image:
	hack/image/build.sh

# One image per known agent type (agentsession-claude-code, -codex, -gemini), from images/<type>.
agent-images:
	hack/image/build-agents.sh

demo:
	hack/demo.sh

bench: $(STAMP)
	$(PY) -m benchmarks
