"""Benchmark of the speculative engine against the local one on a pool with stragglers, and its
markdown table (`easy bench speculative`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from easy_core.core.params import Params
from easy_core.core.stats import quantile
from easy_core.runtime.speculative import SpeculationStats, SpeculativeEngine


def speculative_benchmark(
    params: Params,
    pool_path: str | Path = "configs/pools/sim-default.yaml",
    n: int = 500,
    seed: int = 0,
    worker_limit: int = 8,
    slow_rate: float = 0.1,
    *,
    slow_factor: float = 5.0,
    straggler_factor: float = 1.5,
    policy: str = "greedy",
) -> list[dict[str, Any]]:
    """Tail latency against cost: `policy` on `n` sim test tasks, the pool's executors made
    slow (x`slow_factor`) on a `slow_rate` share of calls, under the same worker limit with
    three engines: `LocalEngine` dispatching eagerly with no timeout or retry (`local`), the
    same with the runtime's step timeout and retries as straggler mitigation (`local+retry`,
    from params), and `SpeculativeEngine` (`speculative`). Same tasks and seeds for all;
    discrete-event clock. One row per engine."""
    # Imported here: evaluation imports the runtime, and the engine must not depend on it.
    from easy_core.core.config import load_yaml_model
    from easy_core.core.params import ResilienceParams
    from easy_core.core.schemas import FaultRates, PoolConfig
    from easy_core.executors.pool import BackendContext, ExecutorPool
    from easy_core.policies.batch import run_episodes
    from easy_core.runtime.episode import EpisodeRunner
    from easy_core.runtime.local_engine import LocalEngine
    from easy_core.world.sim_world import SimWorld
    from easy_core.world.suites.sim import SimSuite

    config = load_yaml_model(pool_path, PoolConfig)
    if slow_rate > 0:
        faults = FaultRates(slow=slow_rate, slow_factor=slow_factor)
        config = config.model_copy(update={"faults": faults})
    pool = ExecutorPool.from_config(
        config, BackendContext(world=SimWorld(params.sim, params.capability))
    )
    suite = SimSuite(params.sim)
    tasks = list(suite.tasks("test", n, seed))
    runtime = params.runtime
    no_retry = ResilienceParams(max_attempts=1, breaker_failures=10**9)
    speculative = SpeculativeEngine(
        worker_limit, straggler_factor=straggler_factor, step_timeout_s=runtime.step_timeout_s
    )
    engines: list[tuple[str, Any]] = [
        (
            "local",
            LocalEngine(
                step_timeout_s=runtime.step_timeout_s,
                max_parallel=worker_limit,
                resilience=no_retry,
                difficulty_slope=params.capability.difficulty_slope,
            ),
        ),
        (
            "local+retry",
            LocalEngine(
                step_timeout_s=runtime.step_timeout_s,
                step_timeout_factor=runtime.step_timeout_factor,
                max_parallel=worker_limit,
                resilience=params.resilience,
                difficulty_slope=params.capability.difficulty_slope,
            ),
        ),
        ("speculative", speculative),
    ]
    rows = []
    for name, engine in engines:
        runner = EpisodeRunner(pool, params, suite.check, engine=engine)
        trajectories = run_episodes(tasks, runner, policy, seed, mode="virtual")
        makespans = [t.metrics.makespan_s for t in trajectories]
        costs = [t.metrics.cost_usd for t in trajectories]
        stats = engine.stats if isinstance(engine, SpeculativeEngine) else SpeculationStats()
        rows.append(
            {
                "engine": name,
                "policy": policy,
                "n": len(trajectories),
                "worker_limit": worker_limit,
                "slow_rate": slow_rate,
                "slow_factor": slow_factor,
                "success_rate": sum(t.correct for t in trajectories) / max(1, len(trajectories)),
                "p50_makespan_s": quantile(makespans, 0.5),
                "p95_makespan_s": quantile(makespans, 0.95),
                "mean_makespan_s": sum(makespans) / max(1, len(makespans)),
                "mean_cost_usd": sum(costs) / max(1, len(costs)),
                "time_budget_ends": sum(t.end_reason == "time_budget" for t in trajectories),
                "retries": sum(t.metrics.n_retries for t in trajectories)
                - stats.copies,  # a speculated step reports 2 attempts: not a retry
                "copies": stats.copies,
                "wins": stats.wins,
                "cancelled_cost_usd": stats.cancelled_cost_usd,
                "max_in_flight": stats.max_in_flight,
            }
        )
    return rows


def speculative_markdown(rows: list[dict[str, Any]]) -> str:
    """The benchmark as a markdown table, with each engine's P95 makespan change and cost
    overhead against the first row (the eager `local` baseline)."""
    base = rows[0]
    lines = [
        "| engine | success | P50 makespan (s) | P95 makespan (s) | mean makespan (s) "
        "| mean cost ($) | P95 vs base | cost vs base | cancelled calls ($/episode) "
        "| time-budget ends | retries | copies | wins |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        p95 = row["p95_makespan_s"] / base["p95_makespan_s"] - 1 if base["p95_makespan_s"] else 0
        cost = row["mean_cost_usd"] / base["mean_cost_usd"] - 1 if base["mean_cost_usd"] else 0
        lines.append(
            f"| {row['engine']} | {row['success_rate']:.3f} | {row['p50_makespan_s']:.2f} "
            f"| {row['p95_makespan_s']:.2f} | {row['mean_makespan_s']:.2f} "
            f"| {row['mean_cost_usd']:.6f} | {p95:+.1%} | {cost:+.1%} "
            f"| {row['cancelled_cost_usd'] / max(1, row['n']):.6f} | {row['time_budget_ends']} "
            f"| {row['retries']} | {row['copies']} | {row['wins']} |"
        )
    first = rows[0]
    lines.append("")
    lines.append(
        f"{first['policy']} policy, {first['n']} sim test tasks, worker limit "
        f"{first['worker_limit']}, {first['slow_rate']:.0%} of calls slow "
        f"x{first['slow_factor']:g}; discrete-event clock. Cost vs base also moves with the "
        "episodes a time budget cuts short (they spend less)."
    )
    return "\n".join(lines)
