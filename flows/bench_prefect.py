"""Benchmark of the Prefect plan engine beside the local engine (docs/BENCHMARKS.md):

    python -m flows.bench_prefect --json

A 50-step random layered DAG of 200 ms wall-time sim steps; makespan over the critical path for
both engines, the mean per-step dispatch delay, and the flow's fixed start-up, reported apart."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time

from prefect import flow

from easy_core.benchmarks.engine_bench import bench_pool, dispatch_delays, plan_for, random_dag_task
from easy_core.plans.validation import critical_path_s, plan_graph, width
from easy_core.runtime.local_engine import LocalEngine
from flows.prefect_engine import PrefectEngine
from flows.settings import params_from, task_runner

STEP_S = 0.2


async def measure(engine, plan, pool, task) -> dict[str, float]:
    outcome = await engine.execute(plan, pool.session(1e9), task)
    assert all(r.status == "ok" for r in outcome.results), "bench steps must all succeed"
    makespan = max(r.finished_s for r in outcome.results)
    critical = critical_path_s(plan, {r.step_id: r.latency_s for r in outcome.results})
    return {
        "makespan_over_critical_path": makespan / critical,
        "mean_dispatch_delay_ms": 1000 * statistics.mean(dispatch_delays(plan, outcome.results)),
        "critical_path_s": critical,
    }


@flow(name="bench-prefect-engine", task_runner=task_runner(params_from(None)))
async def bench_flow(steps: int = 50, runs: int = 5, flow_called_at: float = 0.0) -> dict:
    body_started = time.monotonic()
    rng = random.Random(0)
    pool = bench_pool(ttft_s=STEP_S)
    tasks = [random_dag_task(steps, 6, rng, max_extra_tokens=0) for _ in range(runs)]
    figures: dict[str, float | int] = {
        "flow_startup_s": body_started - flow_called_at,
        "dag_steps": steps,
        "dag_min_width": min(width(plan_graph(plan_for(t))) for t in tasks),
        "step_s": STEP_S,
    }
    for label, engine in (("prefect", PrefectEngine()), ("local", LocalEngine())):
        rows = [await measure(engine, plan_for(t), pool, t) for t in tasks]
        for key in ("makespan_over_critical_path", "mean_dispatch_delay_ms"):
            figures[f"{label}_{key}_median"] = statistics.median(r[key] for r in rows)
        figures[f"{label}_makespan_over_critical_path_max"] = max(
            r["makespan_over_critical_path"] for r in rows
        )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = asyncio.run(bench_flow(args.steps, args.runs, time.monotonic()))
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        for key, value in figures.items():
            print(f"{key}: {value:.4g}" if isinstance(value, float) else f"{key}: {value}")


if __name__ == "__main__":
    main()
