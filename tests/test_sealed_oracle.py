"""Outcomes are sealed: only the oracle reaches them, by type. A non-oracle policy's first plan
does not move when the hidden outcomes change, and its later plans move only with what it
observed; the oracle's do move (so the check can fail)."""

from __future__ import annotations

import pytest

from easy_core.core.clock import DiscreteEventClock, run_synchronously
from easy_core.core.errors import PolicyError
from easy_core.core.params import Params
from easy_core.core.schemas import StepResult, Trajectory
from easy_core.executors.pool import load_pool
from easy_core.plans.prompting import plan_text
from easy_core.policies import get_policy
from easy_core.runtime.episode import EpisodeRunner
from easy_core.runtime.policy import EpisodeState, PoolView, public_task
from easy_core.world.suites.sim import SimSuite
from tests.conftest import SIM_DEFAULT

SEALED = ["strongest", "cheapest", "random", "greedy", "greedy-once", "greedy-sample"]
LEARNED = ["progress", "graph"]
N = 40


def episodes(params: Params, policy: str, outcome_seed: int) -> list[Trajectory]:
    world = params.model_copy(
        update={"sim": params.sim.model_copy(update={"outcome_seed": outcome_seed})}
    )
    runner = EpisodeRunner(load_pool(SIM_DEFAULT, world), world, SimSuite.check)
    return [
        run_synchronously(runner.run(task, get_policy(policy), 7, DiscreteEventClock()))
        for task in SimSuite(world.sim).tasks("test", N, 2)
    ]


def observed(result: StepResult) -> tuple:
    """Everything of a result a policy can read."""
    return (
        result.step_id,
        result.executor,
        result.status,
        result.output,
        result.self_check,
        result.tokens_in,
        result.tokens_out,
        round(result.latency_s, 9),
        result.error,
    )


def check_sealed(params: Params, policy: str) -> tuple[int, int]:
    """(episodes compared, later turns compared); fails on a plan that moved without cause."""
    later = 0
    for a, b in zip(episodes(params, policy, 0), episodes(params, policy, 1), strict=True):
        assert a.milestones and b.milestones
        assert plan_text(a.milestones[0].plan) == plan_text(b.milestones[0].plan), policy
        for i in range(1, min(len(a.milestones), len(b.milestones))):
            seen_a = [observed(r) for m in a.milestones[:i] for r in m.results]
            seen_b = [observed(r) for m in b.milestones[:i] for r in m.results]
            if seen_a != seen_b:
                break
            assert plan_text(a.milestones[i].plan) == plan_text(b.milestones[i].plan), policy
            later += 1
    return N, later


@pytest.mark.parametrize("policy", SEALED)
def test_a_policy_without_outcomes_plans_the_same_in_another_world(params, policy):
    check_sealed(params, policy)


@pytest.mark.parametrize("policy", LEARNED)
def test_the_learned_policies_plan_the_same_in_another_world(trained_params, policy):
    check_sealed(trained_params, policy)


def test_the_worlds_differ_and_the_oracle_sees_it(params):
    greedy = [t.correct for t in episodes(params, "greedy", 0)]
    assert greedy != [t.correct for t in episodes(params, "greedy", 1)]
    with pytest.raises(AssertionError):
        check_sealed(params, "oracle")


def test_later_turns_are_compared_where_observations_agree(params):
    _, later = check_sealed(params, "greedy")
    assert later > 0  # the conditional part of the property is exercised


def test_the_state_a_policy_gets_reaches_no_outcome(params):
    pool = load_pool(SIM_DEFAULT, params)
    task = next(SimSuite(params.sim).tasks("test", 1, 0))
    view = public_task(task)
    assert view.answer == "" and all(s.gold == "" for s in view.subtasks) and not view.metadata
    assert task.answer and all(s.gold for s in task.subtasks)  # the real task keeps its golds
    state = EpisodeState(view, PoolView.of(pool), params, 0, pool.session(1.0).ledger)
    assert not hasattr(state.pool, "executors")
    assert [p.name for p in state.pool.profiles] == list(pool.executors)
    with pytest.raises(PolicyError, match="only the episode loop"):
        run_synchronously(get_policy("oracle").act(state))


def test_privileged_guidance_needs_its_flag_and_is_written_into_the_card():
    from easy_core.core.errors import ConfigError
    from easy_core.core.params import load_params
    from easy_core.learning.checkpoints import privileged_note

    for field in (
        "sft_data.teacher=oracle",
        "grpo.guide=[greedy, oracle]",
        "grpo.continuation=oracle",
    ):
        with pytest.raises(ConfigError, match="allow_privileged: true"):
            load_params(None, [field])
    allowed = load_params(None, ["grpo.guide=[oracle]", "grpo.allow_privileged=true"])
    assert allowed.grpo.guide == ["oracle"]
    assert "Privileged guidance" in privileged_note(allowed.grpo.guide)
    assert privileged_note(["greedy", "strongest"]) == ""
