"""The speculative dispatcher: worker limit, straggler copies, the race and its cost."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from easy_core.benchmarks.speculative_bench import (
    speculative_benchmark,
    speculative_markdown,
)
from easy_core.core.clock import DiscreteEventClock, run_synchronously
from easy_core.core.config import load_yaml_model
from easy_core.core.params import Params, ResilienceParams
from easy_core.core.schemas import (
    ExecutorProfile,
    FaultRates,
    LatencyModel,
    PoolConfig,
    StepRequest,
    StepResult,
)
from easy_core.core.stats import quantile
from easy_core.executors.pool import BackendContext, ExecutorPool
from easy_core.policies import get_policy
from easy_core.policies.batch import run_episodes
from easy_core.runtime.episode import EpisodeRunner
from easy_core.runtime.local_engine import LocalEngine
from easy_core.runtime.speculative import SpeculativeEngine
from easy_core.world.sim_world import SimWorld
from easy_core.world.suites.sim import SimSuite, generate_task
from tests.conftest import SIM_DEFAULT, run
from tests.helpers import make_plan

TASK = generate_task(0, "test", 0)
NO_RETRY = ResilienceParams(max_attempts=1, breaker_failures=10**9)


# ---------------------------------------------------------------- scripted races


class Racer:
    """Latency and failure scripted per (step, attempt). Its profile predicts 1 s per call; a
    call is 100 input and 100 output tokens at $1 each way."""

    def __init__(
        self, latency: dict[tuple[str, int], float], fail: frozenset[tuple[str, int]] = frozenset()
    ):
        self.profile = ExecutorProfile(
            name="racer",
            backend="tool",
            price_in_per_1m=1e4,
            price_out_per_1m=1e4,
            latency=LatencyModel(ttft_s=1.0, tokens_per_s=1e12, prefill_tokens_per_s=1e12),
            context_window=100_000,
            max_concurrency=100,
        )
        self.latency = latency
        self.fail = fail
        self.calls: list[tuple[str, int]] = []

    def simulate(self, request: StepRequest) -> StepResult:
        key = (request.step_id, request.attempt)
        self.calls.append(key)
        failed = key in self.fail
        return StepResult(
            step_id=request.step_id,
            executor="racer",
            status="failed" if failed else "ok",
            error="scripted failure" if failed else None,
            output=f"out-{request.step_id}",
            tokens_in=100,
            tokens_out=100,
            cost_usd=self.profile.cost_usd(100, 100),
            latency_s=self.latency.get(key, 1.0),
        )

    def estimate_input_tokens(self, request: StepRequest) -> int:
        return 100

    def output_token_cap(self, request: StepRequest) -> int:
        return 100


class AsyncRacer(Racer):
    """The same, through the asyncio path only (no `simulate`)."""

    def __getattribute__(self, name: str):  # noqa: ANN204
        if name == "simulate":
            raise AttributeError(name)
        return super().__getattribute__(name)

    async def run(self, request: StepRequest) -> StepResult:
        result = Racer.simulate(self, request)
        await asyncio.sleep(result.latency_s)
        return result


def race(steps, executor, *, workers=4, budget=1e9, deadline=None, discrete=True):
    plan = make_plan(steps, executor="racer")
    session = ExecutorPool.of("test", [executor]).session(budget)
    engine = SpeculativeEngine(workers, straggler_factor=1.5)
    kwargs = {"origin": 0.0, "deadline": deadline}
    if discrete:
        outcome = run_synchronously(
            engine.execute(plan, session, TASK, clock=DiscreteEventClock(), **kwargs)
        )
    else:
        outcome = run(engine.execute(plan, session, TASK, **kwargs))
    ledger = session.ledger
    assert ledger.reserved_usd == pytest.approx(0.0, abs=1e-12)
    assert ledger.spent_usd == pytest.approx(sum(r.cost_usd for r in outcome.results))
    return outcome, engine.stats, ledger


@pytest.mark.parametrize("discrete", [True, False])
def test_a_straggler_gets_a_copy_that_wins(discrete):
    racer = Racer({("a", 0): 10.0, ("a", 1): 1.0})
    outcome, stats, ledger = race([("a", []), ("b", ["a"])], racer, discrete=discrete)
    a, b = outcome.results
    assert a.status == "ok" and a.attempts == 2 and a.faults == ["straggler"]
    assert a.finished_s == pytest.approx(2.5)  # copy at 1.5 x 1 s, done 1 s later
    assert a.latency_s == pytest.approx(2.5)
    assert b.started_s == pytest.approx(2.5) and b.status == "ok"
    # Winner $2; the loser ran 2.5 s of its 10: its input $1 plus a quarter of its output.
    assert a.cost_usd == pytest.approx(2.0 + 1.0 + 0.25)
    assert (stats.copies, stats.wins, stats.cancelled) == (1, 1, 1)
    assert stats.cancelled_cost_usd == pytest.approx(1.25)
    assert outcome.critical_path_s == pytest.approx(3.5)
    assert len(ledger.entries) == 3


def test_on_the_asyncio_path_a_cancelled_call_is_charged_by_its_predicted_latency():
    racer = AsyncRacer({("a", 0): 10.0, ("a", 1): 1.0})
    outcome, stats, _ = race([("a", [])], racer, discrete=False)
    (a,) = outcome.results
    assert a.status == "ok" and a.finished_s == pytest.approx(2.5)
    assert a.cost_usd == pytest.approx(2.0 + 2.0)  # ran past its predicted 1 s: all output
    assert stats.wins == 1


def test_a_primary_that_ends_first_cancels_its_copy():
    racer = Racer({("a", 0): 2.0, ("a", 1): 5.0})
    outcome, stats, _ = race([("a", [])], racer)
    (a,) = outcome.results
    assert a.status == "ok" and a.finished_s == pytest.approx(2.0)
    assert a.cost_usd == pytest.approx(2.0 + 1.0 + 0.5 / 5.0)
    assert (stats.copies, stats.wins, stats.cancelled) == (1, 0, 1)


def test_a_failed_primary_whose_copy_succeeds_is_a_success():
    racer = Racer({("a", 0): 2.0, ("a", 1): 1.0}, fail=frozenset({("a", 0)}))
    outcome, stats, _ = race([("a", []), ("b", ["a"])], racer)
    a, b = outcome.results
    assert a.status == "ok" and a.finished_s == pytest.approx(2.5)
    assert a.faults == ["straggler", "failed"] and b.status == "ok"
    assert a.cost_usd == pytest.approx(4.0) and stats.cancelled == 0


def test_a_failed_step_skips_its_dependents_and_is_not_retried():
    racer = Racer({("a", 0): 0.5}, fail=frozenset({("a", 0)}))
    outcome, stats, _ = race([("a", []), ("b", ["a"]), ("c", [])], racer)
    a, b, c = outcome.results
    assert a.status == "failed" and a.attempts == 1
    assert b.status == "skipped" and "dependency a failed" in b.error
    assert c.status == "ok" and racer.calls.count(("a", 0)) == 1 and stats.copies == 0


def test_no_copy_without_a_free_worker():
    racer = Racer({("a", 0): 10.0})
    outcome, stats, _ = race([("a", []), ("b", [])], racer, workers=1)
    a, b = outcome.results
    assert b.started_s == pytest.approx(10.0)  # FIFO: b waits for the only worker
    assert stats.copies == 0 and stats.max_in_flight == 1


def test_a_ready_step_goes_before_a_straggler_copy():
    racer = Racer({("a", 0): 10.0, ("b", 0): 3.0})
    outcome, stats, _ = race([("a", []), ("b", []), ("c", ["b"])], racer, workers=2)
    a, b, c = outcome.results
    assert c.started_s == pytest.approx(3.0)  # b's worker goes to c, not to a's copy
    assert stats.copies == 1 and a.finished_s == pytest.approx(5.0)  # copy after c ends (4 s)


def test_no_copy_when_it_does_not_fit_the_budget():
    racer = Racer({("a", 0): 10.0})
    outcome, stats, ledger = race([("a", [])], racer, budget=3.0)
    (a,) = outcome.results
    assert a.status == "ok" and a.attempts == 1 and a.finished_s == pytest.approx(10.0)
    assert stats.copies == 0 and stats.refused_budget == 1
    assert ledger.spent_usd == pytest.approx(2.0) and outcome.stop_reason is None


@pytest.mark.parametrize("discrete", [True, False])
def test_the_deadline_cancels_both_calls_and_charges_them(discrete):
    racer = Racer({("a", 0): 10.0, ("a", 1): 10.0})
    outcome, stats, ledger = race([("a", []), ("b", ["a"])], racer, deadline=3.0)
    a, b = outcome.results
    assert outcome.stop_reason == "time_budget"
    assert a.status == "failed" and "cancelled" in a.error and b.status == "skipped"
    # Primary ran 3 s of 10, the copy 1.5 s of 10: inputs plus those shares of the outputs.
    assert a.cost_usd == pytest.approx(1.0 + 0.3 + 1.0 + 0.15)
    assert ledger.spent_usd == pytest.approx(a.cost_usd)


# ---------------------------------------------------------------- on the sim suite


def sim_params(params: Params, jitter: float | None = None) -> Params:
    if jitter is None:
        return params
    return params.model_copy(
        update={"sim": params.sim.model_copy(update={"latency_jitter": jitter})}
    )


def sim_pool(params: Params, slow: float = 0.0, max_concurrency: int | None = None):
    config = load_yaml_model(SIM_DEFAULT, PoolConfig)
    if slow:
        config = config.model_copy(update={"faults": FaultRates(slow=slow)})
    if max_concurrency is not None:
        executors = [
            e.model_copy(update={"max_concurrency": max_concurrency}) for e in config.executors
        ]
        config = config.model_copy(update={"executors": executors})
    world = SimWorld(params.sim, params.capability)
    return ExecutorPool.from_config(config, BackendContext(world=world))


def local(workers: int) -> LocalEngine:
    return LocalEngine(max_parallel=workers, resilience=NO_RETRY)


def episodes(pool, params, engine, tasks, policy="greedy", seed=0):
    runner = EpisodeRunner(pool, params, SimSuite.check, engine=engine)
    return run_episodes(tasks, runner, policy, seed, mode="virtual")


def test_without_stragglers_it_is_the_eager_engine(params):
    params = sim_params(params, jitter=0.0)
    pool = sim_pool(params)
    tasks = list(SimSuite(params.sim).tasks("test", 120, 0))
    for policy in ("greedy", "strongest"):
        engine = SpeculativeEngine(4)
        ours = episodes(pool, params, engine, tasks, policy)
        theirs = episodes(pool, params, local(4), tasks, policy)
        assert engine.stats.copies == 0 and engine.stats.steps > 500
        assert [t.model_dump() for t in ours] == [t.model_dump() for t in theirs]


def test_speculation_cuts_the_tail_and_costs_exactly_the_cancelled_calls(params):
    pool = sim_pool(params, slow=0.1)
    tasks = list(SimSuite(params.sim).tasks("test", 300, 1))
    engine = SpeculativeEngine(8)
    policy = get_policy("greedy")
    runner = EpisodeRunner(pool, params, SimSuite.check, engine=engine)
    ours, charges = [], []
    for task in tasks:
        before = engine.stats.cancelled_cost_usd
        ours.append(run_synchronously(runner.run(task, policy, 1, DiscreteEventClock())))
        charges.append(engine.stats.cancelled_cost_usd - before)
    theirs = episodes(pool, params, local(8), tasks, seed=1)
    assert engine.stats.copies > 50 and engine.stats.wins > engine.stats.copies / 2
    p95 = [quantile([t.metrics.makespan_s for t in ts], 0.95) for ts in (ours, theirs)]
    assert p95[0] < 0.95 * p95[1], p95
    compared = 0
    for mine, base, charge in zip(ours, theirs, charges, strict=True):
        steps = [r for m in mine.milestones for r in m.results]
        assert mine.metrics.cost_usd == pytest.approx(sum(r.cost_usd for r in steps), abs=1e-12)
        if mine.end_reason == base.end_reason == "final_answer":
            compared += 1
            assert mine.final_answer == base.final_answer
            assert mine.metrics.cost_usd == pytest.approx(base.metrics.cost_usd + charge, rel=1e-9)
            assert mine.metrics.makespan_s <= base.metrics.makespan_s + 1e-9
    assert compared > 0.9 * len(tasks)
    assert sum(charges) > 0


class CountingExecutor:
    """Counts its calls in flight (all executors share one count), through the asyncio path."""

    in_flight = Counter()
    peak = Counter()

    def __init__(self, inner):
        self.inner = inner
        self.profile = inner.profile

    async def run(self, request: StepRequest) -> StepResult:
        counts, name = CountingExecutor.in_flight, self.profile.name
        counts["all"] += 1
        counts[name] += 1
        for key in ("all", name):
            CountingExecutor.peak[key] = max(CountingExecutor.peak[key], counts[key])
        try:
            return await self.inner.run(request)
        finally:
            counts["all"] -= 1
            counts[name] -= 1

    def estimate_input_tokens(self, request: StepRequest) -> int:
        return self.inner.estimate_input_tokens(request)

    def output_token_cap(self, request: StepRequest) -> int:
        return self.inner.output_token_cap(request)


@pytest.mark.parametrize("workers", [1, 3, 6])
def test_the_worker_and_executor_limits_hold(params, workers):
    faulty = sim_pool(params, slow=0.3, max_concurrency=2)
    pool = ExecutorPool(
        faulty.config, {n: CountingExecutor(e) for n, e in faulty.executors.items()}
    )
    CountingExecutor.in_flight.clear()
    CountingExecutor.peak.clear()
    engine = SpeculativeEngine(workers, sync_fast_path=False)
    episodes(pool, params, engine, list(SimSuite(params.sim).tasks("test", 40, 0)))
    assert (engine.stats.copies > 0) == (workers > 1)  # a copy needs a second worker
    assert CountingExecutor.peak["all"] == engine.stats.max_in_flight <= workers
    assert all(peak <= 2 for name, peak in CountingExecutor.peak.items() if name != "all")
    assert sum(CountingExecutor.in_flight.values()) == 0
    discrete = SpeculativeEngine(workers)
    episodes(faulty, params, discrete, list(SimSuite(params.sim).tasks("test", 200, 0)))
    assert discrete.stats.max_in_flight == workers


def test_the_cost_budget_is_never_exceeded(params):
    pool = sim_pool(params, slow=0.3)
    tasks = [
        task.model_copy(update={"budget_usd": task.budget_usd * share})
        for task, share in zip(
            SimSuite(params.sim).tasks("test", 200, 0), [0.1, 0.2, 0.4, 0.8] * 50, strict=True
        )
    ]
    engine = SpeculativeEngine(8)
    trajectories = episodes(pool, params, engine, tasks)
    assert all(t.metrics.cost_usd <= t.budget_usd + 1e-12 for t in trajectories)
    assert engine.stats.refused_budget > 0 and engine.stats.copies > 0
    assert any(t.end_reason == "cost_budget" for t in trajectories)


def test_the_asyncio_loop_and_the_discrete_clock_agree(params):
    pool = sim_pool(params, slow=0.2)
    tasks = list(SimSuite(params.sim).tasks("test", 40, 0))
    discrete = episodes(pool, params, SpeculativeEngine(4), tasks)
    runner = EpisodeRunner(pool, params, SimSuite.check, engine=SpeculativeEngine(4))
    policy = get_policy("greedy")
    looped = run(_all(runner, tasks, policy))
    for a, b in zip(looped, discrete, strict=True):
        assert_close(a.model_dump(), b.model_dump())
    # The general path (a task per call) ends steps at the same times with the same answers;
    # only what a cancelled call is charged differs (its modelled latency is unknown there).
    general = EpisodeRunner(
        pool, params, SimSuite.check, engine=SpeculativeEngine(4, sync_fast_path=False)
    )
    looped = run(_all(general, tasks, policy))
    for a, b in zip(looped, discrete, strict=True):
        assert a.final_answer == b.final_answer
        assert a.metrics.makespan_s == pytest.approx(b.metrics.makespan_s, abs=1e-9)


async def _all(runner, tasks, policy):
    return [await runner.run(task, policy, 0) for task in tasks]


def assert_close(a, b, path="") -> None:
    """Equal up to float rounding (the asyncio loop's clock keeps running across episodes)."""
    if isinstance(a, float) and isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-9), path
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            assert_close(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_close(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


def test_the_benchmark_is_deterministic_and_reports_the_trade(params):
    rows = speculative_benchmark(params, SIM_DEFAULT, n=150, seed=3, worker_limit=6)
    assert rows == speculative_benchmark(params, SIM_DEFAULT, n=150, seed=3, worker_limit=6)
    by_engine = {row["engine"]: row for row in rows}
    assert list(by_engine) == ["local", "local+retry", "speculative"]
    spec, base = by_engine["speculative"], by_engine["local"]
    assert spec["p95_makespan_s"] < base["p95_makespan_s"]
    assert spec["mean_cost_usd"] > base["mean_cost_usd"]
    assert 0 < spec["wins"] <= spec["copies"] and spec["max_in_flight"] <= 6
    assert base["copies"] == 0 and base["retries"] == 0
    text = speculative_markdown(rows)
    assert "| speculative |" in text and "P95 vs base" in text
