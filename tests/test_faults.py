"""Fault injection and what the engine does about it: retries with backoff, fallback to the next
cheapest capable executor, a per-executor circuit breaker."""

from __future__ import annotations

from collections import Counter

import pytest
import yaml

from easy_core.core.params import ResilienceParams
from easy_core.core.schemas import FaultRates, StepRequest
from easy_core.evaluation.evaluator import EvalSpec, evaluate
from easy_core.executors.faults import ExecutorConnectionError, FaultInjectingExecutor
from easy_core.executors.pool import ExecutorPool
from easy_core.runtime.local_engine import LocalEngine
from easy_core.world.suites.sim import SimSuite, generate_task
from tests.conftest import ROOT, SIM_DEFAULT, run
from tests.helpers import ScriptedExecutor, make_plan

TASK = generate_task(0, "test", 0)
THIRTY_PERCENT = {
    "timeout": 0.05,
    "connection_error": 0.05,
    "http_5xx": 0.08,
    "malformed": 0.05,
    "empty": 0.04,
    "slow": 0.03,
}


class Flaky(ScriptedExecutor):
    """Raises a connection error on its first `failures` calls."""

    def __init__(self, name="flaky", failures=1, **kwargs):
        super().__init__(name, **kwargs)
        self.failures = failures

    async def run(self, request):
        if self.failures > 0:
            self.failures -= 1
            self.calls.append(None)
            raise ExecutorConnectionError(f"{self.profile.name}: refused")
        return await super().run(request)


def execute(plan, executors, resilience=None, budget=1e9):
    pool = ExecutorPool.of("test", executors)
    engine = LocalEngine(resilience=resilience or ResilienceParams())
    return run(engine.execute(plan, pool.session(budget), TASK, origin=0.0))


def test_injected_faults_follow_their_rates(pool):
    rates = FaultRates(**THIRTY_PERCENT)
    faulty = FaultInjectingExecutor(pool.executors["sim-m"], rates)
    seen = Counter()
    for task in SimSuite().tasks("train", 400, seed=3):
        for attempt in range(5):
            request = StepRequest("s", "go", task, (task.subtasks[0].id,), attempt=attempt)
            seen[faulty.draw(request)] += 1
    total = sum(seen.values())
    for kind, rate in THIRTY_PERCENT.items():
        assert seen[kind] / total == pytest.approx(rate, abs=0.015), kind
    assert seen[None] / total == pytest.approx(0.70, abs=0.02)


def test_fault_rates_cannot_add_up_past_one():
    with pytest.raises(ValueError, match="add up to"):
        FaultRates(timeout=0.6, empty=0.6)


def test_a_failed_call_is_retried_after_a_backoff():
    flaky = Flaky(failures=1, latency=1.0)
    result = execute(make_plan([("a", [])], executor="flaky"), [flaky]).results[0]
    assert result.status == "ok" and result.attempts == 2
    assert result.faults == ["connection_error"]
    assert result.finished_s == pytest.approx(0.2 * 2 + 1.0)  # backoff 0.2 s x 2^1, then 1 s


def test_fallback_to_the_next_cheapest_capable_executor_after_the_retries():
    broken = Flaky("cheap", failures=99, price_per_1m=1.0)
    good = ScriptedExecutor("pricey", price_per_1m=5.0)
    spare = ScriptedExecutor("priciest", price_per_1m=50.0)
    result = execute(make_plan([("a", [])], executor="cheap"), [broken, good, spare]).results[0]
    assert result.status == "ok" and result.executor == "pricey"
    assert result.attempts == 4 and result.faults == ["connection_error"] * 3
    assert [c.step_id for c in good.calls] == ["a"] and not spare.calls


def test_an_open_breaker_sends_later_steps_straight_to_the_fallback():
    broken = Flaky("cheap", failures=99, price_per_1m=1.0)
    good = ScriptedExecutor("pricey", price_per_1m=5.0)
    resilience = ResilienceParams(breaker_failures=2, attempts_per_executor=2)
    plan = make_plan([("a", []), ("b", ["a"])], executor="cheap")
    outcome = execute(plan, [broken, good], resilience)
    a, b = outcome.results
    assert a.executor == b.executor == "pricey"
    assert a.attempts == 3 and b.attempts == 1 and b.faults == []
    assert len(broken.calls) == 2


class Mute(ScriptedExecutor):
    """Answers, is paid, but says nothing: an empty output every time."""

    async def run(self, request):
        result = await super().run(request)
        return result.model_copy(update={"output": ""})


def test_retries_are_paid_and_never_pass_the_budget():
    mute = Mute("mute", price_per_1m=1000.0, tokens=100)  # each attempt costs $0.2
    outcome = execute(make_plan([("a", [])], executor="mute"), [mute], budget=0.45)
    result = outcome.results[0]
    assert result.status == "failed" and "does not fit the cost budget" in result.error
    assert result.faults == ["empty", "empty"] and result.cost_usd == pytest.approx(0.4)
    assert outcome.stop_reason == "cost_budget"


@pytest.fixture(scope="module")
def faulty_pool(tmp_path_factory):
    config = yaml.safe_load(SIM_DEFAULT.read_text())
    config["name"] = "sim-default-faulty"
    config["faults"] = THIRTY_PERCENT
    path = tmp_path_factory.mktemp("pools") / "faulty.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("policy", ["greedy", "strongest"])
def test_thirty_percent_faults_on_500_episodes(params, faulty_pool, policy):
    clean, _ = evaluate(EvalSpec("sim", policy, SIM_DEFAULT, n=500, seed=0), params)
    faulty, trajectories = evaluate(EvalSpec("sim", policy, faulty_pool, n=500, seed=0), params)
    assert set(faulty.end_reasons) <= {
        "final_answer",
        "time_budget",
        "cost_budget",
        "max_milestones",
    }
    faults = sum(t.metrics.n_faults for t in trajectories)
    calls = sum(t.metrics.n_steps + t.metrics.n_retries for t in trajectories)
    assert faults / calls == pytest.approx(0.30, abs=0.03)
    assert sum(t.metrics.n_retries for t in trajectories) > 0
    assert faulty.success_rate >= clean.success_rate - 0.05, (
        faulty.success_rate,
        clean.success_rate,
    )


def test_pool_yaml_faults_wrap_the_executors(faulty_pool, params):
    from easy_core.executors.pool import load_pool

    pool = load_pool(faulty_pool, params)
    assert all(isinstance(e, FaultInjectingExecutor) for e in pool.executors.values())
    assert (ROOT / "configs/pools/sim-default.yaml").read_text().count("faults") == 0
