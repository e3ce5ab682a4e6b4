from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from easy_core.core.params import ResilienceParams
from easy_core.core.schemas import Plan, Step
from easy_core.executors.pool import ExecutorPool
from easy_core.plans.validation import critical_path_s
from easy_core.runtime.local_engine import LocalEngine
from easy_core.world.suites.sim import generate_task
from tests.conftest import run
from tests.helpers import ScriptedExecutor, make_plan, random_dags

TASK = generate_task(0, "test", 0)
EPS = 1e-9


def execute(plan, executors, *, engine=None, budget=1e9, deadline=None, mode="virtual"):
    pool = ExecutorPool.of("test", executors)
    engine = engine or LocalEngine()
    session = pool.session(budget)

    async def go():
        return await engine.execute(
            plan, session, TASK, origin=0.0 if mode == "virtual" else None, deadline=deadline
        )

    return run(go(), mode), session


latencies = st.floats(0.01, 10.0, allow_nan=False)


@settings(max_examples=150, deadline=None)
@given(random_dags(), st.data())
def test_every_step_runs_once_after_its_dependencies(steps, data):
    lat = {sid: data.draw(latencies) for sid, _ in steps}
    executor = ScriptedExecutor(latency=lat)
    plan = make_plan(steps)
    outcome, _ = execute(plan, [executor])
    assert sorted(c.step_id for c in executor.calls) == sorted(sid for sid, _ in steps)
    by_id = {r.step_id: r for r in outcome.results}
    assert all(r.status == "ok" for r in outcome.results)
    for sid, deps in steps:
        for dep in deps:
            assert by_id[sid].started_s >= by_id[dep].finished_s - EPS
    # A step starts the moment its own dependencies finish: no barrier, no idle gap.
    for sid, deps in steps:
        ready_at = max((by_id[d].finished_s for d in deps), default=0.0)
        assert by_id[sid].started_s == pytest.approx(ready_at, abs=1e-6)
    makespan = max(r.finished_s for r in outcome.results)
    assert makespan == pytest.approx(critical_path_s(plan, lat), rel=1e-9, abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(random_dags(min_nodes=2), st.data(), st.integers(1, 4))
def test_makespan_never_below_critical_path_under_any_limit(steps, data, limit):
    lat = {sid: data.draw(latencies) for sid, _ in steps}
    executor = ScriptedExecutor(latency=lat, max_concurrency=limit)
    plan = make_plan(steps)
    outcome, _ = execute(plan, [executor])
    makespan = max(r.finished_s for r in outcome.results)
    assert makespan >= critical_path_s(plan, lat) - EPS
    # the per-executor limit holds at every instant
    events = sorted(
        [(c.started, 1) for c in executor.calls] + [(c.finished, -1) for c in executor.calls]
    )
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    assert peak <= limit


@settings(max_examples=60, deadline=None)
@given(random_dags(min_nodes=2), st.data())
def test_sequential_runs_one_step_at_a_time(steps, data):
    lat = {sid: data.draw(latencies) for sid, _ in steps}
    executor = ScriptedExecutor(latency=lat)
    outcome, _ = execute(make_plan(steps), [executor], engine=LocalEngine(max_parallel=1))
    spans = sorted((r.started_s, r.finished_s) for r in outcome.results)
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert start >= end - EPS
    assert max(r.finished_s for r in outcome.results) == pytest.approx(sum(lat.values()))


def test_failed_step_skips_its_dependents_with_the_reason():
    steps = [("a", []), ("b", ["a"]), ("c", ["b"]), ("d", []), ("e", ["d", "c"])]
    executor = ScriptedExecutor(fail={"a"})
    outcome, _ = execute(make_plan(steps), [executor])
    status = {r.step_id: r for r in outcome.results}
    assert status["a"].status == "failed"
    assert status["b"].status == "skipped" and "dependency a failed" in status["b"].error
    assert status["c"].status == "skipped" and "dependency b skipped" in status["c"].error
    assert status["d"].status == "ok"
    assert status["e"].status == "skipped"
    assert {c.step_id for c in executor.calls} == {"a", "d"}


def test_step_timeout_fails_the_step_and_the_plan_goes_on():
    executor = ScriptedExecutor(latency={"slow": 50.0, "fast": 1.0, "after": 1.0})
    plan = make_plan([("slow", []), ("fast", []), ("after", ["slow"])])
    single = ResilienceParams(max_attempts=1)
    outcome, _ = execute(
        plan, [executor], engine=LocalEngine(step_timeout_s=5.0, resilience=single)
    )
    status = {r.step_id: r for r in outcome.results}
    assert status["slow"].status == "failed" and "timeout after 5s" in status["slow"].error
    assert status["slow"].finished_s == pytest.approx(5.0)
    assert status["fast"].status == "ok"
    assert status["after"].status == "skipped"


def test_executor_exception_becomes_a_failed_step():
    executor = ScriptedExecutor(raise_on={"a"})
    outcome, _ = execute(make_plan([("a", []), ("b", [])]), [executor])
    status = {r.step_id: r for r in outcome.results}
    assert status["a"].status == "failed" and "RuntimeError: boom in a" in status["a"].error
    assert status["b"].status == "ok"


def test_placeholders_from_several_dependencies_are_filled():
    executor = ScriptedExecutor()
    plan = Plan(
        steps=[
            Step(id="a", executor="scripted", instruction="first"),
            Step(id="b", executor="scripted", instruction="second"),
            Step(
                id="c",
                executor="scripted",
                instruction="join {a} and {b}; keep {x}",
                depends_on=["a", "b"],
            ),
        ]
    )
    execute(plan, [executor])
    joined = next(c.instruction for c in executor.calls if c.step_id == "c")
    assert joined == "join out-a and out-b; keep {x}"


def test_a_step_that_would_pass_the_cost_budget_never_starts():
    # each step reserves 200 tokens at $1000/1M = $0.2; the budget fits two of them
    executor = ScriptedExecutor(price_per_1m=1000.0, tokens=100)
    plan = make_plan([("a", []), ("b", []), ("c", []), ("d", ["a"])])
    outcome, session = execute(plan, [executor], budget=0.5)
    status = {r.step_id: r.status for r in outcome.results}
    assert outcome.stop_reason == "cost_budget"
    assert "could cost up to $0.200000" in outcome.stop_detail
    assert status == {"a": "ok", "b": "ok", "c": "skipped", "d": "skipped"}
    assert {c.step_id for c in executor.calls} == {"a", "b"}
    assert session.ledger.spent_usd <= 0.5


def test_time_budget_cancels_running_steps_and_starts_nothing_new():
    executor = ScriptedExecutor(
        latency={"a": 1.0, "long": 100.0, "b": 1.0, "c": 1.0}, price_per_1m=10.0
    )
    plan = make_plan([("a", []), ("long", []), ("b", ["a"]), ("c", ["long"])])
    outcome, session = execute(plan, [executor], deadline=10.0)
    status = {r.step_id: r for r in outcome.results}
    assert outcome.stop_reason == "time_budget"
    assert status["a"].status == "ok" and status["b"].status == "ok"
    assert status["long"].status == "failed" and "time budget" in status["long"].error
    assert status["long"].finished_s == pytest.approx(10.0)
    assert status["long"].cost_usd == pytest.approx(executor.profile.cost_usd(100, 0))
    assert status["c"].status == "skipped"
    assert session.ledger.reserved_usd == pytest.approx(0.0)


def test_cancelled_step_waiting_for_a_slot_costs_nothing():
    executor = ScriptedExecutor(latency=100.0, max_concurrency=1, price_per_1m=10.0)
    outcome, session = execute(make_plan([("a", []), ("b", [])]), [executor], deadline=5.0)
    status = {r.step_id: r for r in outcome.results}
    assert status["a"].cost_usd > 0 and status["b"].cost_usd == 0.0
    assert "before it started" in status["b"].error
    assert session.ledger.spent_usd == pytest.approx(status["a"].cost_usd)


@settings(max_examples=40, deadline=None)
@given(random_dags(min_nodes=2, max_nodes=20), st.integers(1, 3), st.integers(0, 10_000))
# two steps that free their slots at the same instant, with three steps ready behind them
@example(steps=[("s0", []), ("s1", [])], limit=3, seed=737)
def test_timer_fast_path_and_task_path_give_identical_results(steps, limit, seed):
    import random

    from easy_core.benchmarks.engine_bench import bench_pool, plan_for, random_dag_task

    task = random_dag_task(len(steps) + 6, 1, random.Random(seed))
    pool = bench_pool()
    pool.executors["bench"].profile.max_concurrency = limit
    plan = plan_for(task)

    def outcome(fast: bool):
        async def go():
            return await LocalEngine(sync_fast_path=fast).execute(
                plan, pool.session(1e9), task, origin=0.0, seed=seed
            )

        return run(go())

    fast, slow = outcome(True), outcome(False)
    assert [r.model_dump() for r in fast.results] == [r.model_dump() for r in slow.results]


@pytest.mark.wall
def test_wall_time_matches_virtual_time():
    lat = {"a": 0.03, "b": 0.05, "c": 0.02, "d": 0.04}
    steps = [("a", []), ("b", ["a"]), ("c", ["a"]), ("d", ["b", "c"])]
    virtual, _ = execute(make_plan(steps), [ScriptedExecutor(latency=lat)])
    wall, _ = execute(make_plan(steps), [ScriptedExecutor(latency=lat)], mode="wall")
    v = max(r.finished_s for r in virtual.results)
    w = max(r.finished_s for r in wall.results)
    assert v == pytest.approx(0.12)
    assert v <= w < v + 0.05
    assert [r.status for r in wall.results] == [r.status for r in virtual.results]


class _AsyncOnly:
    """Wraps a policy without its `synchronous` mark, forcing the asyncio virtual loop."""

    def __init__(self, policy):
        self.inner = policy
        self.name = policy.name
        self.privileged = getattr(policy, "privileged", False)  # the oracle keeps its outcomes

    async def act(self, state):
        return await self.inner.act(state)

    async def act_with_outcomes(self, state, outcomes):
        return await self.inner.act_with_outcomes(state, outcomes)


@pytest.mark.parametrize("policy", ["greedy", "oracle", "random", "strongest"])
@pytest.mark.parametrize("sequential", [False, True])
def test_discrete_event_clock_agrees_with_the_asyncio_loop(pool, params, policy, sequential):
    from easy_core.policies import get_policy
    from easy_core.policies.batch import run_episodes
    from easy_core.runtime.episode import EpisodeRunner
    from easy_core.world.suites.sim import SimSuite

    tasks = list(SimSuite(params.sim).tasks("test", 60, seed=4))
    tight = [
        t.model_copy(update={"budget_usd": t.budget_usd / 6, "budget_s": t.budget_s / 4})
        for t in tasks[:20]
    ]
    runner = EpisodeRunner(pool, params, SimSuite.check, sequential=sequential)
    discrete = run_episodes(tasks + tight, runner, policy, seed=4)

    async def on_loop():
        inner = _AsyncOnly(get_policy(policy))
        return [await runner.run(t, inner, 4) for t in tasks + tight]

    looped = run(on_loop())
    reasons = {t.end_reason for t in discrete}
    assert "final_answer" in reasons and reasons & {"cost_budget", "time_budget"}
    for a, b in zip(discrete, looped, strict=True):
        assert_close(a.model_dump(), b.model_dump())


def assert_close(a, b, path="") -> None:
    """Equal up to float rounding (the asyncio loop's clock keeps running across episodes)."""
    if isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-9), path
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            assert_close(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_close(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


def test_discrete_clock_refuses_what_it_cannot_simulate():
    import asyncio

    from easy_core.core.clock import DiscreteEventClock, run_synchronously

    async def waits():
        await asyncio.sleep(0)

    with pytest.raises(RuntimeError, match="asyncio loop"):
        run_synchronously(waits())
    pool = ExecutorPool.of("scripted", [ScriptedExecutor()])
    coro = LocalEngine().execute(
        make_plan([("a", [])]), pool.session(1.0), TASK, clock=DiscreteEventClock()
    )
    with pytest.raises(TypeError, match="cannot simulate"):
        run_synchronously(coro)


def test_the_baseline_table_runs_every_fixed_baseline_without_trained_models(
    params, tmp_path
) -> None:
    """`easy bench baselines` on a fresh checkout: no learned or LLM policy (those need models)."""
    from easy_core.benchmarks.engine_bench import baseline_table
    from tests.conftest import SIM_DEFAULT

    missing = params.model_copy(
        update={"orchestrator": params.orchestrator.model_copy(update={"model": str(tmp_path)})}
    )
    rows = baseline_table(missing, SIM_DEFAULT, n=3)
    assert [(r.policy, r.sequential) for r in rows] == [
        (name, sequential)
        for name in ("strongest", "cheapest", "random", "greedy", "oracle")
        for sequential in (False, True)
    ]
    assert all(r.n == 3 for r in rows)
