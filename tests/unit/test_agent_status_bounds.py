"""What the agent says of itself is bounded wherever it goes: agentctl's answers, the AgentSession's status (cut by
the operator, refused past the bounds by the CRD schema), pending permission requests; real agents' values pass
whole. And an agent that stops answering after its session started is reported, with agentctl's reason."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from agentsession.agentctl.permissions import (
    MAX_OPTIONS,
    TOOL_CALL_MAX_BYTES,
    TRUNCATED_META,
    bounded_options,
    bounded_tool_call,
)
from agentsession.api.acp import (
    DESCRIPTION_MAX_CHARS,
    ELLIPSIS,
    LABEL_MAX_CHARS,
    MODE_ID_MAX_CHARS,
    MODES_MAX,
    MODES_MAX_BYTES,
    SESSION_ID_MAX_CHARS,
    AgentIdentity,
    SessionMode,
    bounded_modes,
    config_option_modes,
)
from agentsession.api.crd import SESSION, crd_manifest
from agentsession.api.models import AcpStatus, AgentSessionStatus
from agentsession.api.reasons import AGENT_NOT_ANSWERING
from agentsession.contract.wire import StartResponse
from agentsession.controller.status_mapper import Observation, map_status, start_due
from tests.support.pod_bodies import CREATED, NOW, UID, pod_body

# The modes of the agents the project ships, as their adapters give them (claude-agent-acp 0.23, codex-acp's
# presets, gemini-cli 0.61).
REAL_MODES = {
    "claude-code": [
        {"id": "default", "name": "Default", "description": "Standard behavior, prompts for dangerous operations"},
        {"id": "acceptEdits", "name": "Accept Edits", "description": "Auto-accept file edit operations"},
        {"id": "plan", "name": "Plan Mode", "description": "Planning mode, no actual tool execution"},
        {"id": "dontAsk", "name": "Don't Ask", "description": "Don't prompt for permissions, deny if not pre-approved"},
        {"id": "bypassPermissions", "name": "Bypass Permissions", "description": "Bypass all permission checks"},
    ],
    "codex": [
        {"id": "read-only", "name": "Read Only", "description": "Codex can read files in the current workspace. "
         "Approval is required to edit files or access the internet."},
        {"id": "auto", "name": "Default", "description": "Codex can read and edit files in the current workspace, "
         "and run commands. Approval is required to access the internet or edit other files."},
        {"id": "full-access", "name": "Full Access", "description": "Codex can edit files outside this workspace "
         "and access the internet without asking for approval. Exercise caution when using."},
    ],
    "gemini": [
        {"id": "default", "name": "Default", "description": "Prompts for approval"},
        {"id": "autoEdit", "name": "Auto Edit", "description": "Auto-approves edit tools"},
        {"id": "yolo", "name": "YOLO", "description": "Auto-approves all tools"},
        {"id": "plan", "name": "Plan", "description": "Read-only mode"},
    ],
}  # fmt: skip


@pytest.mark.parametrize("agent", sorted(REAL_MODES))
def test_real_agents_modes_pass_whole(agent: str) -> None:
    modes = REAL_MODES[agent]
    assert [m.model_dump(exclude_none=True) for m in bounded_modes(modes)] == modes
    status = AcpStatus.model_validate(
        {
            "sessionId": "3f2c9a4e-8b1d-4c6f-9e2a-7d5b0c1a2e3f",
            "currentModeId": modes[0]["id"],
            "availableModes": modes,
        }
    )
    assert status.model_dump(mode="json", exclude_none=True)["availableModes"] == modes
    assert status.currentModeId == modes[0]["id"]
    info = AgentIdentity.model_validate({"name": "@zed-industries/claude-agent-acp", "version": "0.23.1"})
    assert info.name == "@zed-industries/claude-agent-acp"


def test_display_strings_are_cut_and_say_so() -> None:
    mode = SessionMode.model_validate({"id": "m", "name": "N" * 10_000, "description": "D" * 10**6})
    assert len(mode.name) == LABEL_MAX_CHARS
    assert mode.name.endswith(ELLIPSIS)
    assert mode.description is not None
    assert len(mode.description) == DESCRIPTION_MAX_CHARS
    info = AgentIdentity.model_validate({"name": "n" * 10**6, "title": "t" * 300, "version": "v"})
    assert (len(info.name), len(info.title or ""), info.version) == (LABEL_MAX_CHARS, LABEL_MAX_CHARS, "v")


def test_modes_are_bounded_in_count_and_bytes_and_an_id_past_its_bound_leaves_its_mode_out() -> None:
    many = [{"id": f"m{i}", "name": f"Mode {i}"} for i in range(10_000)]
    assert [m.id for m in bounded_modes(many)] == [f"m{i}" for i in range(MODES_MAX)]
    fat = [{"id": f"m{i}", "name": "N" * 5000, "description": "D" * 5000} for i in range(1000)]
    kept = bounded_modes(fat)
    assert 0 < len(kept) < MODES_MAX
    assert sum(len(m.model_dump_json(exclude_none=True)) for m in kept) <= MODES_MAX_BYTES
    odd = [
        {"id": "x" * (MODE_ID_MAX_CHARS + 1), "name": "Long"},
        {"name": "no id"},
        42,
        {"id": "ok", "name": "Ok"},
    ]
    assert [m.id for m in bounded_modes(odd)] == ["ok"]


def test_a_mode_config_option_is_bounded_the_same_way() -> None:
    option = {
        "id": "mode",
        "options": [{"value": "v" * 300, "name": "too long"}, *({"value": f"p{i}"} for i in range(500))],
    }
    modes = config_option_modes(option)
    assert len(modes) == MODES_MAX
    assert modes[0].id == modes[0].name == "p0"
    assert config_option_modes({"id": "mode", "options": "not a list"}) == []


def test_what_agentctl_answers_is_bounded_and_an_overlong_id_is_no_id() -> None:
    bloated = {
        "success": True,
        "session_id": "s" * SESSION_ID_MAX_CHARS,
        "current_mode_id": "c" * 10**6,
        "available_modes": [{"id": f"m{i}", "name": "N" * 10**5} for i in range(1000)],
        "agent_info": {"name": "n" * 10**6},
    }
    start = StartResponse.model_validate(bloated)
    assert start.current_mode_id is None
    assert len(start.available_modes) <= MODES_MAX
    assert len(start.model_dump_json()) < 2 * MODES_MAX_BYTES
    with pytest.raises(ValidationError, match="session_id"):
        StartResponse.model_validate({**bloated, "session_id": "s" * (SESSION_ID_MAX_CHARS + 1)})
    assert StartResponse(success=True, session_id="s").current_mode_id is None


def test_the_status_the_operator_builds_is_bounded() -> None:
    status = AcpStatus(
        sessionId="s1",
        currentModeId="c" * 300,
        availableModes=bounded_modes([{"id": f"m{i}", "name": "N" * 10**4} for i in range(1000)]),
        agentInfo=AgentIdentity(name="n" * 10**5),
    )
    dumped = AgentSessionStatus(acp=status).model_dump_json()
    assert len(dumped) < 2 * MODES_MAX_BYTES
    assert status.currentModeId is None


def _acp_schema() -> dict[str, Any]:
    root = crd_manifest(SESSION)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    acp: dict[str, Any] = root["properties"]["status"]["properties"]["acp"]["properties"]
    return acp


def test_the_crd_refuses_what_is_past_the_bounds() -> None:
    acp = _acp_schema()
    assert acp["sessionId"]["maxLength"] == SESSION_ID_MAX_CHARS
    assert acp["currentModeId"]["maxLength"] == MODE_ID_MAX_CHARS
    modes = acp["availableModes"]
    assert modes["maxItems"] == MODES_MAX
    mode = modes["items"]["properties"]
    assert (mode["id"]["maxLength"], mode["name"]["maxLength"], mode["description"]["maxLength"]) == (
        MODE_ID_MAX_CHARS,
        LABEL_MAX_CHARS,
        DESCRIPTION_MAX_CHARS,
    )
    info = acp["agentInfo"]["properties"]
    assert {info[k]["maxLength"] for k in ("name", "title", "version")} == {LABEL_MAX_CHARS}
    # The largest status.acp the schema admits stays far below an object's limit in etcd (1.5 MiB).
    largest = MODES_MAX * (MODE_ID_MAX_CHARS + LABEL_MAX_CHARS + DESCRIPTION_MAX_CHARS)
    assert largest < 256 * 1024


def test_a_permission_requests_tool_call_is_kept_within_its_bound() -> None:
    small = {"toolCallId": "c1", "title": "Edit", "content": [{"type": "diff", "newText": "x" * 1000}]}
    assert bounded_tool_call(small) == small
    big = {
        "toolCallId": "c2",
        "title": "Write",
        "kind": "edit",
        "rawInput": {"content": "y" * (3 * 1024 * 1024)},
    }
    cut = bounded_tool_call(big)
    assert len(json.dumps(cut)) <= TOOL_CALL_MAX_BYTES
    assert cut["_meta"][TRUNCATED_META] == {"bytes": len(json.dumps(big))}
    assert cut["rawInput"]["content"].endswith(ELLIPSIS)
    many = {"toolCallId": "c3", "title": "T" * 1000, "rawInput": {"parts": ["z" * 100_000] * 100}}
    summary = bounded_tool_call(many)
    assert set(summary) == {"toolCallId", "title", "_meta"}
    assert len(summary["title"]) == LABEL_MAX_CHARS
    options = [
        {"optionId": f"o{i}", "name": "N" * 1000, "kind": "allow_once", "_meta": {"x": 1}} for i in range(50)
    ]
    options.insert(
        0, {"optionId": "o" * (MODE_ID_MAX_CHARS + 1), "name": "unanswerable", "kind": "allow_once"}
    )
    kept = bounded_options(options)
    assert [o["optionId"] for o in kept] == [f"o{i}" for i in range(MAX_OPTIONS)]
    assert all(len(o["name"]) == LABEL_MAX_CHARS and "_meta" not in o for o in kept)


INITIALIZED_AT = NOW - timedelta(minutes=5)
STARTED = AcpStatus(sessionId="sess-1", podUID=UID, agentctlRestartCount=0, agentRestartCount=0,
                    initializedTime=INITIALIZED_AT)  # fmt: skip
RUNNING = {"state": {"running": {"startedAt": CREATED}}, "started": True, "restartCount": 0}


def agent_pod(*, agent_ready: bool, containers_ready_since: str) -> dict[str, Any]:
    conditions = [
        {"type": "PodScheduled", "status": "True"},
        {
            "type": "ContainersReady",
            "status": "True" if agent_ready else "False",
            "lastTransitionTime": containers_ready_since,
        },
    ]
    return pod_body(
        conditions=conditions,
        agentctl={**RUNNING, "ready": True},
        agent={**RUNNING, "ready": agent_ready},
        podIP="10.1.2.3",
    )


def observe(pod: dict[str, Any], agent_error: str | None = None) -> Observation:
    return Observation(
        generation=1,
        suspend=False,
        previous=AgentSessionStatus(acp=STARTED),
        now=NOW,
        pod=pod,
        agent_error=agent_error,
    )


def test_an_agent_that_stops_answering_after_its_session_started_is_reported_failed_with_the_reason() -> None:
    lost = agent_pod(agent_ready=False, containers_ready_since="2026-01-01T11:58:00Z")
    why = "agentctl lost the ACP connection to the agent: agentctl stopped reading the agent's messages"
    status = map_status(observe(lost, why))
    initialized = status.condition("AgentInitialized")
    assert initialized is not None
    assert (initialized.status, initialized.reason) == ("False", AGENT_NOT_ANSWERING)
    assert "since 2026-01-01T11:58:00Z" in initialized.message
    assert why in initialized.message
    assert status.phase == "Failed"
    assert not start_due(observe(lost))  # agentctl resumes by itself once the agent answers


def test_an_agent_not_ready_yet_before_its_session_or_ready_again_is_no_loss() -> None:
    before = agent_pod(agent_ready=False, containers_ready_since="2026-01-01T11:54:00Z")
    initialized = map_status(observe(before)).condition("AgentInitialized")
    assert initialized is not None
    assert initialized.reason == "Initialized"
    stopping = agent_pod(agent_ready=False, containers_ready_since="2026-01-01T11:58:00Z")
    stopping["metadata"]["deletionTimestamp"] = "2026-01-01T11:58:00Z"
    stopped = map_status(observe(stopping)).condition("AgentInitialized")
    assert stopped is not None
    assert stopped.reason != AGENT_NOT_ANSWERING
    again = agent_pod(agent_ready=True, containers_ready_since="2026-01-01T11:58:00Z")
    status = map_status(observe(again))
    assert status.phase == "Ready"
