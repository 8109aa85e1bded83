"""A soak cycle's pure parts: its plan comes from the seed alone, its history check catches a lost entry or a
prompt sent twice, and an API server that is away is not the run's failure."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest
from benchmarks.soak.cycle import Cycle, CycleFailed, Plan, draw_plan
from benchmarks.soak.driver import api_away

from agentsession.kube.errors import Conflict, KubeError, KubeUnavailable, NotFound


def plans(seed: str, count: int = 20) -> list[Plan]:
    rng = random.Random(seed)
    return [draw_plan(rng, f"soak-0-{n}") for n in range(count)]


def test_a_seed_replays_the_same_plans_and_another_seed_does_not() -> None:
    assert plans("1/0") == plans("1/0")
    assert plans("1/0") != plans("2/0")


def test_each_prompt_ends_with_a_word_of_its_own() -> None:
    # The reply's last chunk is that word: it tells the end of this turn's reply from any other's.
    for plan in plans("1/0"):
        prompts = [p for p in (plan.initial_prompt, *plan.prompts) if p]
        last_words = [p.split()[-1] for p in prompts]
        assert len(set(last_words)) == len(last_words)
        assert all(word.startswith(f"#{plan.name}.") for word in last_words)


def test_plans_cover_both_resumes_initial_prompts_and_permissions() -> None:
    drawn = plans("1/0", 40)
    assert {p.resume_through_gateway for p in drawn} == {True, False}
    assert any(p.initial_prompt for p in drawn)
    assert any(p.initial_prompt is None for p in drawn)
    assert any("permission" in p.prompts[0] for p in drawn)
    assert all(0.5 <= pause <= 4.0 for p in drawn for pause in p.pauses)


def entry(kind: str, text: str, at: str = "t") -> dict[str, Any]:
    return {
        "agentId": "soak/a",
        "timestamp": at,
        "notification": {"update": {"sessionUpdate": kind, "content": {"type": "text", "text": text}}},
    }


def cycle(initial: str | None = "first") -> Cycle:
    plan = Plan("a", initial, ("second", "third"), False, (1.0, 1.0, 1.0))
    return Cycle(SimpleNamespace(namespace="soak"), plan)


BEFORE = [entry("user_message_chunk", "first"), entry("agent_message_chunk", "You said: first")]


def test_a_history_that_grows_at_its_end_is_kept() -> None:
    c = cycle()
    c._keep(BEFORE, "the first initialize")
    c.expected.append("second")
    c._keep([*BEFORE, entry("user_message_chunk", "second")], "a prompt")
    assert len(c.history) == 3


@pytest.mark.parametrize(
    "after",
    [
        [BEFORE[0]],  # the reply was lost
        [BEFORE[0], entry("agent_message_chunk", "You said: first", at="other")],  # rewritten
        [BEFORE[1], BEFORE[0]],  # reordered
    ],
)
def test_a_history_that_lost_or_changed_an_entry_fails_the_cycle(after: list[dict[str, Any]]) -> None:
    c = cycle()
    c._keep(BEFORE, "the first initialize")
    with pytest.raises(CycleFailed) as failed:
        c._keep(after, "the resume")
    assert failed.value.invariant == "history"
    assert "after the resume" in failed.value.detail


def test_an_initial_prompt_sent_again_on_resume_fails_the_cycle() -> None:
    c = cycle()
    c._keep(BEFORE, "the first initialize")
    with pytest.raises(CycleFailed, match=r"prompts in the history are \['first', 'first'\]"):
        c._keep([*BEFORE, entry("user_message_chunk", "first")], "the resume")


@pytest.mark.parametrize(
    ("error", "away"),
    [
        (KubeUnavailable("create failed: connection refused"), True),
        (KubeError("create failed: HTTP 503 ServiceUnavailable", status=503), True),
        (NotFound("get failed: HTTP 404", status=404), False),
        (Conflict("create failed: HTTP 409 AlreadyExists", status=409, reason="AlreadyExists"), False),
    ],
)
def test_an_api_server_that_is_away_is_told_from_a_refusal(error: KubeError, away: bool) -> None:
    # A cycle cut short by the first is the shared control plane's doing; by the second, the run's own.
    assert api_away(error) is away
