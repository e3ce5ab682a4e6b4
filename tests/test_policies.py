from __future__ import annotations

import pytest

from easy_core.core.capability import expected_success
from easy_core.core.datasets import read_trajectories
from easy_core.evaluation.evaluator import EvalSpec, evaluate
from easy_core.world.suites.sim import SimSuite
from tests.conftest import SIM_DEFAULT, SIM_UNSEEN

N = 300


@pytest.fixture(scope="module")
def table(params):
    rows = {}
    for policy in ("strongest", "cheapest", "random", "greedy", "oracle"):
        for sequential in (False, True):
            rows[policy, sequential] = evaluate(
                EvalSpec("sim", policy, SIM_DEFAULT, n=N, seed=11, sequential=sequential), params
            )
    return rows


def metrics(table, policy, sequential=False):
    return table[policy, sequential][0]


def test_oracle_is_the_upper_bound(table):
    oracle = metrics(table, "oracle")
    for policy in ("strongest", "cheapest", "random", "greedy"):
        assert oracle.success_rate >= metrics(table, policy).success_rate
    assert oracle.mean_cost_usd < metrics(table, "strongest").mean_cost_usd


def test_cost_ordering_of_single_executor_baselines(table):
    assert metrics(table, "cheapest").mean_cost_usd < metrics(table, "greedy").mean_cost_usd
    assert metrics(table, "greedy").mean_cost_usd < metrics(table, "strongest").mean_cost_usd
    assert metrics(table, "cheapest").success_rate < metrics(table, "strongest").success_rate


def test_strongest_and_cheapest_use_one_executor_per_task(table):
    for policy, usual in (("strongest", "sim-xl"), ("cheapest", "sim-xs")):
        per_task = [
            {step.executor for m in t.milestones for step in m.plan.steps}
            for t in table[policy, False][1]
        ]
        assert all(len(used) == 1 for used in per_task)
        assert sum(used == {usual} for used in per_task) > 0.8 * len(per_task)


def test_greedy_escalates_doubted_subtasks(table, pool, params):
    tasks = {t.id: t for t in SimSuite().tasks("test", N, seed=11)}
    slope = params.capability.difficulty_slope
    trajectories = table["greedy", False][1]
    retried = [t for t in trajectories if t.metrics.n_milestones > 1]
    assert len(retried) > 0.1 * len(trajectories), "greedy should retry doubted subtasks"
    for t in retried:
        first, second = t.milestones[0], t.milestones[1]
        doubted = {sub for r in first.results if r.self_check is False for sub in r.covers}
        before = {s.covers[0]: s.executor for s in first.plan.steps}
        rerun = {s.covers[0]: s.executor for s in second.plan.steps}
        assert doubted & set(rerun)
        for sub_id, executor in rerun.items():
            if sub_id not in doubted or executor != before[sub_id]:
                continue
            # kept its executor: only when no stronger one exists (it reruns for new inputs)
            sub = tasks[t.task_id].subtask(sub_id)
            best = max(expected_success(p, sub.skill, sub.difficulty, slope) for p in pool.profiles)
            assert (
                expected_success(pool.profile(executor), sub.skill, sub.difficulty, slope) == best
            )


def test_sequential_runs_the_same_plans_slower(table):
    for policy in ("strongest", "cheapest", "oracle"):
        pairs = zip(table[policy, False][1], table[policy, True][1], strict=True)
        finished = 0
        for par, seq in pairs:
            assert seq.metrics.makespan_s >= par.metrics.makespan_s - 1e-9
            if seq.end_reason == par.end_reason == "final_answer":
                finished += 1
                assert seq.correct == par.correct
                assert seq.metrics.cost_usd == pytest.approx(par.metrics.cost_usd)
            else:  # only the slower sequential run may hit the time budget
                assert seq.end_reason == "time_budget"
        assert finished > 0.9 * N
        assert metrics(table, policy, True).mean_makespan_s > metrics(table, policy).mean_makespan_s


def test_random_is_seeded(params):
    a = evaluate(EvalSpec("sim", "random", SIM_DEFAULT, n=20, seed=1), params)[0]
    b = evaluate(EvalSpec("sim", "random", SIM_DEFAULT, n=20, seed=1), params)[0]
    assert a == b


def test_baselines_run_on_the_unseen_pool(params):
    for policy in ("greedy", "oracle", "strongest"):
        m, trajectories = evaluate(EvalSpec("sim", policy, SIM_UNSEEN, n=40, seed=0), params)
        assert m.pool == "sim-unseen"
        assert m.end_reasons.get("policy_error", 0) == 0
        assert m.success_rate > 0.2


def test_easy_compare_writes_table_references_and_both_pareto_plots(tmp_path):
    import subprocess
    import sys

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "easy_core.cli",
            "compare",
            "--pool",
            str(SIM_DEFAULT),
            "--policies",
            "strongest,greedy",
            "--n",
            "40",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    report = (tmp_path / "compare.md").read_text()
    for policy in ("strongest", "greedy", "oracle"):  # the oracle joins as the bound
        assert f"| {policy} |" in report
    assert "cost / strongest's" in report
    for png in ("pareto-cost.png", "pareto-makespan.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"
    # every episode kept for paired analysis, the same tasks for each policy
    episodes = {
        policy: list(read_trajectories(tmp_path / "episodes" / policy / "shards"))
        for policy in ("strongest", "greedy")
    }
    assert [t.task_id for t in episodes["strongest"]] == [t.task_id for t in episodes["greedy"]]
    assert len(episodes["greedy"]) == 40 and {t.policy for t in episodes["greedy"]} == {"greedy"}


def test_the_comparison_reads_which_executor_each_policy_chose(table, params):
    """What `easy bench orchestrators` reports beside reward (a checkpoint whose choices equal
    a baseline's rule has learnt that rule): steps per executor, and the subtasks on which a
    policy picked the oracle's executor, the cheapest one that succeeds."""
    from easy_core.evaluation.checkpoint_comparison import (
        executor_choices,
        executor_steps,
        oracle_agreement,
    )
    from easy_core.world.suites import get_suite

    strongest, cheapest, greedy, oracle = (
        table[name, False][1] for name in ("strongest", "cheapest", "greedy", "oracle")
    )
    top = {
        name: next(iter(executor_steps(runs)))
        for name, runs in (("xl", strongest), ("xs", cheapest))
    }
    assert top == {"xl": "sim-xl", "xs": "sim-xs"}  # most used first; tool subtasks go to sim-tool
    assert len(executor_steps(oracle)) > len(executor_steps(strongest))
    assert sum(executor_steps(greedy).values()) == sum(
        len(m.results) for t in greedy for m in t.milestones
    )
    assert oracle_agreement(oracle, oracle)["share"] == 1.0
    shares = {
        name: oracle_agreement(runs, oracle)
        for name, runs in (("strongest", strongest), ("cheapest", cheapest), ("greedy", greedy))
    }
    assert all(0 < s["same"] < s["subtasks"] for s in shares.values()), shares
    assert shares["greedy"]["share"] > shares["strongest"]["share"], shares
    with pytest.raises(ValueError, match="tasks differ"):
        oracle_agreement(strongest[1:], oracle[:-1])
    tasks = list(get_suite("sim", params).tasks("test", N, 11))
    assert strongest[0].task_id == tasks[0].id
    by_difficulty = executor_choices(oracle, tasks, "difficulty")
    assert set(by_difficulty) == {"1", "2", "3", "4", "5"}

    def share_of_xs(level: str) -> float:
        return by_difficulty[level].get("sim-xs", 0) / sum(by_difficulty[level].values())

    assert share_of_xs("1") > share_of_xs("5")  # the cheapest that succeeds: easy ones go small
    skills = executor_choices(strongest, tasks, "skill")
    assert {e for executors in skills.values() for e in executors} == {"sim-xl", "sim-tool"}

    def total(groups: dict[str, dict[str, int]]) -> int:
        return sum(sum(executors.values()) for executors in groups.values())

    assert total(skills) == total(executor_choices(strongest, tasks, "difficulty")) > N
