"""Traces, the progress views, the `progress` and `graph` policies, the budgeted choice, and
prefix-aware ordering."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from easy_core.benchmarks.prefix_bench import prefix_benchmark
from easy_core.core.errors import ConfigError
from easy_core.core.params import Params, PrefixParams
from easy_core.core.schemas import StepResult
from easy_core.evaluation.evaluator import EvalSpec, evaluate
from easy_core.executors.pool import load_pool
from easy_core.learning.traces import TRACE_COLUMNS, collect_traces, read_traces, write_traces
from easy_core.policies.budgeted import Candidate, choose
from easy_core.policies.progress import GainPredictor, log_loss, training_arrays
from easy_core.policies.progress_view import posterior_correct, progress_view
from easy_core.runtime.prefix_order import PrefixCache
from easy_core.world.suites.sim import SimSuite
from tests.conftest import SIM_DEFAULT, SIM_UNSEEN


def test_posterior_follows_the_self_check() -> None:
    assert posterior_correct(0.7, None, 0.9) == 0.7
    assert posterior_correct(0.7, True, 0.5) == pytest.approx(0.7)  # an uninformative check
    assert posterior_correct(0.7, True, 0.9) > 0.7 > posterior_correct(0.7, False, 0.9)
    assert posterior_correct(0.7, False, 1.0) == 0.0


def test_progress_views_move_through_the_regimes(params: Params, pool) -> None:
    task = next(SimSuite(params.sim).tasks("test", 1, 0))
    profiles = {p.name: p for p in pool.profiles}
    slope = params.capability.difficulty_slope
    start = progress_view(task, {}, profiles, slope)
    assert (start.regime, start.completion, start.score) == (0, 0.0, 0.0)

    def result(sub_id: str, check: bool) -> StepResult:
        return StepResult(
            step_id=sub_id, executor="sim-xl", status="ok", self_check=check, covers=[sub_id]
        )

    first = task.subtasks[0].id
    partial = progress_view(task, {first: result(first, True)}, profiles, slope)
    assert partial.regime == 1 and 0 < partial.completion < 1
    doubted = {s.id: result(s.id, s.id != first) for s in task.subtasks}
    trusted = {s.id: result(s.id, True) for s in task.subtasks}
    view_doubted = progress_view(task, doubted, profiles, slope, partial.completion)
    view_trusted = progress_view(task, trusted, profiles, slope, partial.completion)
    assert (view_doubted.regime, view_trusted.regime) == (2, 3)
    assert view_trusted.score > view_doubted.score
    assert view_trusted.trend == pytest.approx(view_trusted.completion - partial.completion)


def test_traces_are_written_by_greedy_at_its_own_threshold(params: Params, tmp_path: Path) -> None:
    """policy_training.trace_greedy_threshold, not the baseline's threshold, decides which
    executors the trace-writing greedy uses: 0 sends every step to the cheapest capable one."""
    from easy_core.learning.policy_training import train_policies

    def traced_cost(threshold: float) -> float:
        knobs = {"trace_policies": ["greedy"], "n_tasks": 30, "trace_greedy_threshold": threshold}
        tp = params.policy_training.model_copy(update=knobs)
        path = tmp_path / f"traces-{threshold}.parquet"
        train_policies(params.model_copy(update={"policy_training": tp}), (), path, None)
        rows = read_traces(path)
        return sum(row["cost_usd"] for row in rows) / len(rows)

    assert traced_cost(0.0) < 0.5 * traced_cost(0.95)


def test_traces_record_every_step_with_its_dag_position(params: Params, tmp_path: Path) -> None:
    rows = collect_traces(params, SIM_DEFAULT, ["greedy"], 30, seed=3)
    path = write_traces(tmp_path / "t.parquet", rows)
    back = read_traces(path)
    assert back == rows and set(TRACE_COLUMNS) <= set(back[0])
    assert not list(tmp_path.glob(".*tmp"))
    for row in back:
        assert row["cost_usd"] >= 0 and row["tokens_in"] > 0 or row["status"] == "skipped"
        assert row["depth"] >= 0 and row["n_descendants"] >= row["n_children"]
        if row["n_deps"] == 0 and row["milestone"] == 0:
            assert row["depth"] == 0
        if row["correct"]:
            assert row["inputs_correct"] and row["status"] == "ok"
    # each first-milestone plan has one critical chain that starts at a root
    first = [r for r in back if r["milestone"] == 0 and r["task_id"] == back[0]["task_id"]]
    assert any(r["on_critical_path"] and r["depth"] == 0 for r in first)
    task = next(SimSuite(params.sim).tasks("train", 1, 3))
    assert first[0]["task_id"] == task.id
    assert {r["subtask"] for r in first} == {s.id for s in task.subtasks}


def test_read_traces_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="easy traces"):
        read_traces(tmp_path / "missing.parquet")


def test_progress_predictor_beats_the_base_rate(trained_params) -> None:
    params = trained_params
    report = json.loads((Path(params.policies.progress_model).parent / "report.json").read_text())
    progress = report["progress"]
    rows = read_traces(Path(params.policies.progress_model).parent / "traces.parquet")
    x, y, _ = training_arrays(rows)
    constant = log_loss(y * 0 + y.mean(), y)
    assert progress["logloss_mixed"] < constant
    assert progress["logloss_mixed"] <= min(progress["logloss_mlp"], progress["logloss_knn"]) + 0.01
    predictor = GainPredictor.load(params.policies.progress_model)
    paths = predictor.paths(x[:50])
    assert ((paths["gate"] > 0) & (paths["gate"] < 1)).all()
    assert ((paths["mixed"] >= 0) & (paths["mixed"] <= 1)).all()


@pytest.mark.parametrize("policy", ["progress", "graph"])
@pytest.mark.parametrize("pool_path", [SIM_DEFAULT, SIM_UNSEEN])
def test_learned_policies_beat_the_naive_baselines_within_budget(
    trained_params, policy, pool_path
) -> None:
    params = trained_params
    metrics, trajectories = evaluate(EvalSpec("sim", policy, pool_path, 150, 0), params)
    for baseline in ("cheapest", "random"):
        reference, _ = evaluate(EvalSpec("sim", baseline, pool_path, 150, 0), params)
        assert metrics.success_rate > reference.success_rate + 0.2
    strongest, _ = evaluate(EvalSpec("sim", "strongest", pool_path, 150, 0), params)
    assert metrics.mean_cost_usd < strongest.mean_cost_usd
    for t in trajectories:
        assert t.metrics.cost_usd <= t.budget_usd + 1e-12
        assert t.end_reason in {"final_answer", "time_budget", "cost_budget", "max_milestones"}


def test_cost_weight_trades_success_for_cost(trained_params) -> None:
    params = trained_params
    costs = []
    for weight in (0.5, 4.0, 16.0):
        tuned = params.model_copy(
            update={"policies": params.policies.model_copy(update={"graph_cost_weight": weight})}
        )
        metrics, _ = evaluate(EvalSpec("sim", "graph", SIM_DEFAULT, 150, 0), tuned)
        costs.append(metrics.mean_cost_usd)
    assert costs[0] > costs[1] > costs[2]


def test_a_missing_model_is_a_clear_error(params: Params, tmp_path: Path) -> None:
    for policy, field in (("progress", "progress_model"), ("graph", "graph_model")):
        missing = params.model_copy(
            update={"policies": params.policies.model_copy(update={field: str(tmp_path / "none")})}
        )
        with pytest.raises(ConfigError, match="easy train-policy"):
            evaluate(EvalSpec("sim", policy, SIM_DEFAULT, 1, 0), missing)


def test_budgeted_choice_downgrades_to_fit_the_budget() -> None:
    options = {
        "a": [Candidate("cheap", 0.5, 1.0, 1.0), Candidate("dear", 0.95, 10.0, 1.0)],
        "b": [Candidate("cheap", 0.6, 1.0, 1.0), Candidate("dear", 0.7, 10.0, 1.0)],
    }
    free = choose(
        options, cost_weight=0.0, time_weight=0.0, budget_usd=100, budget_s=100, remaining_usd=100
    )
    assert {k: c.executor for k, c in free.items()} == {"a": "dear", "b": "dear"}
    tight = choose(
        options, cost_weight=0.0, time_weight=0.0, budget_usd=100, budget_s=100, remaining_usd=12
    )
    # dropping b's upgrade loses less log success per dollar than dropping a's
    assert {k: c.executor for k, c in tight.items()} == {"a": "dear", "b": "cheap"}
    priced = choose(
        options, cost_weight=10.0, time_weight=0.0, budget_usd=100, budget_s=100, remaining_usd=100
    )
    assert priced["b"].executor == "cheap"
    assert priced["a"].executor == ("dear" if math.log(0.95 / 0.5) > 0.9 else "cheap")


def test_prefix_cache_is_an_lru_bounded_in_tokens() -> None:
    cache = PrefixCache(100)
    assert not cache.touch("a", 60) and cache.touch("a", 60)
    assert not cache.touch("b", 40)
    assert cache.touch("a", 60)  # a is now the most recent
    assert not cache.touch("c", 40)  # evicts b, the least recent
    assert "b" not in cache and "a" in cache and "c" in cache
    assert not cache.touch("huge", 1000) and "huge" not in cache
    # bounded in prompts too: a server that keeps only its last prompt
    last = PrefixCache(10_000, max_entries=1)
    assert not last.touch("a", 60) and last.touch("a", 60)
    assert not last.touch("b", 60) and "a" not in last and not last.touch("a", 60)


def test_prefix_ordering_raises_hits_and_serves_every_step(params: Params) -> None:
    pool = load_pool(SIM_DEFAULT, params)
    tasks = list(SimSuite(params.sim).tasks("test", 80, 0))
    settings = PrefixParams(workflows=80, concurrent=24)
    fifo = prefix_benchmark(params, pool, tasks, settings, "fifo")
    grouped = prefix_benchmark(params, pool, tasks, settings, "prefix")
    assert fifo["workflows"] == grouped["workflows"] == 80
    assert grouped["hit_rate"] > fifo["hit_rate"]
    assert grouped["input_usd"] < fifo["input_usd"]
    no_bypass = prefix_benchmark(
        params, pool, tasks, settings.model_copy(update={"max_bypass": 0}), "prefix"
    )
    assert no_bypass == {**fifo, "order": "prefix"}
