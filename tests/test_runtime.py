from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from easy_core.core.schemas import Plan, Step
from easy_core.policies import POLICIES, get_policy
from easy_core.runtime.episode import EpisodeRunner
from easy_core.world.suites.sim import SimSuite, generate_task
from tests.conftest import run


def runner_for(pool, params, **overrides):
    if overrides:
        params = params.model_copy(update={"runtime": params.runtime.model_copy(update=overrides)})
    return EpisodeRunner(pool, params, SimSuite.check)


class Scripted:
    """A policy that replays given turns (Plan objects or raw text)."""

    name = "scripted"

    def __init__(self, *turns):
        self.turns = list(turns)
        self.seen_errors: list[str | None] = []

    async def act(self, state):
        self.seen_errors.append(state.repair_error)
        turn = self.turns.pop(0)
        if isinstance(turn, Exception):
            raise turn
        return turn


def step(sid, executor="sim-m", deps=(), covers=("t1",)):
    return Step(
        id=sid, executor=executor, instruction="go", depends_on=list(deps), covers=list(covers)
    )


def test_final_answer_ends_the_episode_and_is_checked(pool, params):
    task = generate_task(0, "test", 0)
    right = run(runner_for(pool, params).run(task, Scripted(Plan(final_answer=task.answer))))
    wrong = run(runner_for(pool, params).run(task, Scripted(Plan(final_answer="nope"))))
    assert right.end_reason == wrong.end_reason == "final_answer"
    assert right.correct and not wrong.correct
    assert right.reward.correct == 1.0 and wrong.reward.correct == 0.0


def test_a_final_answer_may_cite_the_step_that_produced_it(pool, params):
    """`"{m1-t6}"` answers with that step's answer to the final subtask; citing a step that
    has no result is an invalid turn (repaired, then the episode ends)."""
    task = generate_task(0, "test", 0)
    steps = []
    for sub in task.subtasks:
        deps = [f"m1-{d}" for d in sub.depends_on]
        steps.append(step(f"m1-{sub.id}", "sim-xl", deps, (sub.id,)))
    cite = f"{{m1-{task.sink.id}}}"
    trajectory = run(
        runner_for(pool, params).run(task, Scripted(Plan(steps=steps), Plan(final_answer=cite)))
    )
    [sink_result] = [r for r in trajectory.milestones[0].results if task.sink.id in r.covers]
    assert trajectory.end_reason == "final_answer"
    assert trajectory.final_answer == sink_result.sub_answers[task.sink.id] != cite
    assert trajectory.correct == (trajectory.final_answer == task.answer)
    policy = Scripted(Plan(final_answer=cite), Plan(final_answer=cite))
    early = run(runner_for(pool, params).run(task, policy))
    assert early.end_reason == "invalid_plan" and "has no result" in early.end_detail
    assert "final_answer cites step" in policy.seen_errors[1]


def test_invalid_turn_is_repaired_once_then_ends_the_episode(pool, params):
    task = generate_task(0, "test", 0)
    policy = Scripted("not json", Plan(final_answer=task.answer))
    repaired = run(runner_for(pool, params).run(task, policy))
    assert repaired.correct and policy.seen_errors[1].startswith("plan is not valid JSON")
    assert repaired.reward.completeness < 1.0

    twice = run(
        runner_for(pool, params).run(
            task, Scripted("{", '{"steps": [{"id": "a", "executor": "nobody", "instruction": ""}]}')
        )
    )
    assert twice.end_reason == "invalid_plan"
    assert "nobody" in twice.end_detail
    assert twice.reward.correct == 0.0


def test_policy_exception_ends_the_episode_with_its_reason(pool, params):
    task = generate_task(0, "test", 0)
    result = run(runner_for(pool, params).run(task, Scripted(ValueError("model server down"))))
    assert result.end_reason == "policy_error"
    assert "ValueError: model server down" in result.end_detail


def test_max_milestones(pool, params):
    task = generate_task(0, "test", 0)
    turns = [Plan(steps=[step(f"s{i}")]) for i in range(3)]
    result = run(runner_for(pool, params, max_milestones=2).run(task, Scripted(*turns)))
    assert result.end_reason == "max_milestones"
    assert result.metrics.n_milestones == 2


def test_later_milestones_see_earlier_results(pool, params):
    task = generate_task(0, "test", 2)
    sub = task.subtasks[1]
    first = Plan(steps=[step("a", covers=[task.subtasks[0].id])])
    second = Plan(steps=[step("b", deps=["a"], covers=[sub.id])])
    policy = Scripted(first, second, Plan(final_answer="x"))
    result = run(runner_for(pool, params).run(task, policy))
    assert [len(m.results) for m in result.milestones] == [1, 1]
    assert result.milestones[1].results[0].status == "ok"


def test_cost_budget_ends_the_episode_with_that_reason(pool, params):
    task = generate_task(0, "test", 3).model_copy(update={"budget_usd": 1e-5})
    plan = Plan(
        steps=[step(f"s{i}", executor="sim-xl", covers=[s.id]) for i, s in enumerate(task.subtasks)]
    )
    result = run(runner_for(pool, params).run(task, Scripted(plan)))
    assert result.end_reason == "cost_budget"
    assert result.metrics.cost_usd <= 1e-5
    assert "budget" in result.end_detail


def test_time_budget_ends_the_episode(pool, params):
    task = generate_task(0, "test", 3).model_copy(update={"budget_s": 0.5})
    chain = Plan(
        steps=[
            step("a", executor="sim-xl"),
            step("b", executor="sim-xl", deps=["a"], covers=["t2"]),
        ]
    )
    result = run(runner_for(pool, params).run(task, Scripted(chain)))
    assert result.end_reason == "time_budget"
    assert result.metrics.makespan_s == pytest.approx(0.5)


@settings(max_examples=300, deadline=None)
@given(
    # not the LLM one (test_llm_policy.py) nor `program`, which needs the python tool that sim
    # pools lack (test_program_aided.py)
    st.sampled_from(sorted(set(POLICIES) - {"easy", "program"})),
    st.integers(0, 10_000),
    st.floats(1e-6, 0.05),
    st.floats(0.5, 200.0),
    st.booleans(),
)
def test_spend_never_exceeds_the_hard_budget(
    pool, trained_params, policy, index, budget_usd, budget_s, sequential
):
    params = trained_params
    task = generate_task(index % 97, "test", index).model_copy(
        update={"budget_usd": budget_usd, "budget_s": budget_s}
    )
    runner = EpisodeRunner(pool, params, SimSuite.check, sequential=sequential)
    result = run(runner.run(task, get_policy(policy), seed=index))
    spent = sum(r.cost_usd for m in result.milestones for r in m.results)
    assert result.metrics.cost_usd == pytest.approx(spent, abs=1e-12)
    assert spent <= budget_usd + 1e-12
    assert result.metrics.makespan_s <= budget_s + 1e-9
    assert result.end_reason in {"final_answer", "cost_budget", "time_budget", "max_milestones"}


def test_oracle_refuses_non_sim_pools(params):
    from easy_core.executors.pool import ExecutorPool
    from tests.helpers import ScriptedExecutor

    pool = ExecutorPool.of("scripted", [ScriptedExecutor()])
    task = generate_task(0, "test", 0)
    result = run(EpisodeRunner(pool, params, SimSuite.check).run(task, get_policy("oracle")))
    assert result.end_reason == "policy_error"
    assert "sim" in result.end_detail
