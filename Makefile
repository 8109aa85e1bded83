# Every target runs from a fresh clone: the virtualenv is made on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv test unit lint typecheck cluster-up cluster-down cluster-kubeconfig image agent-images demo bench soak scale crd mutation console-assets plugin

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

# Regenerates crds/agentsessions.yaml and crds/agentsessionpools.yaml from the pydantic models.
crd: $(STAMP)
	$(PY) -m agentsession.api.crd crds

# `kubectl agentsession` as one file to copy onto the PATH (docs/kubectl-plugin.md): a zipapp of
# operator/agentsession/kubectl_plugin that the python3 on the PATH runs (3.11+, with aiohttp and kubernetes).
# It needs no virtualenv to build.
PLUGIN := build/kubectl-agentsession
plugin:
	PYTHONPATH=operator $(PYTHON) -m agentsession.kubectl_plugin.build $(PLUGIN)

cluster-up:
	hack/cluster/up.sh

cluster-down:
	hack/cluster/down.sh

cluster-kubeconfig:
	@hack/cluster/kubeconfig.sh

image:
	hack/image/build.sh

# xterm.js for the gateway's web console (pinned, from npm), into operator/agentsession/gateway/console/vendor.
console-assets:
	hack/image/vendor-console.sh

# One image per known agent type (agentsession-claude-code, -codex, -gemini), from images/<type>.
agent-images:
	hack/image/build-agents.sh

demo:
	hack/demo.sh

bench: $(STAMP)
	$(PY) -m benchmarks

# Soak: SOAK_MINUTES (default 30) of create / prompt / suspend / resume / delete churn of demo-agent sessions, at
# most SOAK_SESSIONS (default 6) at a time, on the local cluster's node (`make cluster-up image` first), prompts
# through a real gateway; invariants checked every second, memory of the operator, the gateway and each agentctl
# sampled. Takes SOAK_MINUTES plus about two minutes; fails on any violation. Samples and logs in build/soak/, the
# plot in docs/soak-memory.svg (docs/benchmarks.md, "Soak").
SOAK_MINUTES ?= 30
SOAK_SESSIONS ?= 6
soak: $(STAMP)
	KUBECONFIG="$${KUBECONFIG:-$$(hack/cluster/kubeconfig.sh | tail -n1)}" \
	  PATH="$${AGENTSESSION_CACHE:-$$HOME/.cache/agentsession}/bin:$$PATH" \
	  $(PY) -m benchmarks.soak --minutes $(SOAK_MINUTES) --sessions $(SOAK_SESSIONS) --plot docs/soak-memory.svg

# Scale: SCALE_SESSIONS (default 1000) AgentSessions at once through one operator, on SCALE_NODES simulated (kwok)
# nodes of the local cluster, which this starts; one stand-in agentctl answers for every session. Prints latencies,
# sessions per second, the operator's memory, CPU and API requests, and the gateway's session_state with every agent
# (docs/benchmarks.md, "Scale"). `hack/cluster/kwok.sh down` removes the fake nodes.
SCALE_SESSIONS ?= 1000
SCALE_NODES ?= 10
scale: $(STAMP)
	export KUBECONFIG="$${KUBECONFIG:-$$(hack/cluster/kubeconfig.sh | tail -n1)}" \
	  PATH="$${AGENTSESSION_CACHE:-$$HOME/.cache/agentsession}/bin:$$PATH"; \
	  hack/cluster/kwok.sh up --nodes $(SCALE_NODES) && \
	  $(PY) -m benchmarks.scale_bench --sessions $(SCALE_SESSIONS) $(SCALE_ARGS)

# Mutation testing of the pure core and agentctl's journal, events and permissions ([tool.mutmut] in
# pyproject.toml says which), judged by tests/unit and tests/component; then the score per module, failing under
# MUTATION_MIN percent. A habit for developers, not part of `make test` or CI: 30-40 minutes on 2 cores.
# mutmut runs in $(MUTATION_DIR), where agentsession/ links to operator/agentsession and the rest to what the
# tests read; each run starts from a clean copy. Afterwards, in $(MUTATION_DIR): `../../$(VENV)/bin/mutmut results`
# lists the survivors, `mutmut show NAME` shows one. PYTHONPATH: the agentctl and gateway processes the component
# tests start run the mutated copy too; the folder exists before mutmut starts, or Python would remember it as
# missing and import the original.
MUTATION_DIR := build/mutation
MUTATION_MIN ?= 85
MUTATION_JOBS ?= 1
mutation: $(STAMP)
	rm -rf $(MUTATION_DIR)
	mkdir -p $(MUTATION_DIR)/mutants
	for path in operator/agentsession operator pyproject.toml Makefile tests benchmarks charts crds docs examples hack images .ci; do \
	  ln -s ../../$$path $(MUTATION_DIR)/; done
	cd $(MUTATION_DIR) && PYTHONPATH=$$PWD/mutants ../../$(VENV)/bin/mutmut run --max-children $(MUTATION_JOBS)
	$(PY) hack/mutation_score.py --min $(MUTATION_MIN) $(MUTATION_DIR)/mutants
