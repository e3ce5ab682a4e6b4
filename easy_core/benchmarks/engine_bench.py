"""Benchmarks behind docs/BENCHMARKS.md (`easy bench ...`)."""

from __future__ import annotations

import asyncio
import os
import platform
import random
import statistics
import time
from pathlib import Path

from easy_core.core.params import Params, SimParams
from easy_core.core.schemas import (
    EvalMetrics,
    ExecutorProfile,
    LatencyModel,
    Plan,
    PoolConfig,
    Step,
    StepResult,
    Subtask,
    Task,
)
from easy_core.evaluation.evaluator import EvalSpec, evaluate
from easy_core.executors.pool import BackendContext, ExecutorPool, load_pool
from easy_core.plans.validation import critical_path_s, plan_graph, width
from easy_core.policies.baselines import BASELINES
from easy_core.policies.batch import run_episodes
from easy_core.runtime.episode import EpisodeRunner
from easy_core.runtime.local_engine import LocalEngine
from easy_core.runtime.policy import PoolView, public_task
from easy_core.world.sim_world import SimWorld
from easy_core.world.suites.sim import SimSuite

BENCH_TTFT_S = 0.05
BENCH_TOKENS_PER_S = 1000.0


def random_dag_task(
    steps: int, min_width: int, rng: random.Random, max_extra_tokens: int = 150
) -> Task:
    """A task whose subtasks form a random layered DAG of `steps` nodes and width at least
    `min_width`; with the bench executor each subtask takes 50 ms plus 1..`max_extra_tokens` ms
    (`max_extra_tokens=0`: exactly 50 ms)."""
    while True:
        layers: list[list[int]] = []
        count = 0
        while count < steps:
            size = min(rng.randint(3, 9), steps - count)
            layers.append(list(range(count, count + size)))
            count += size
        subtasks = []
        for depth, layer in enumerate(layers):
            earlier = [i for previous in layers[:depth] for i in previous]
            for i in layer:
                deps: set[int] = set()
                if depth:
                    deps.add(rng.choice(layers[depth - 1]))
                    deps.update(rng.sample(earlier, k=min(len(earlier), rng.randint(0, 2))))
                subtasks.append(
                    Subtask(
                        id=f"t{i}",
                        skill="arithmetic",
                        difficulty=3,
                        input_tokens=10,
                        output_tokens=rng.randint(1, max_extra_tokens) if max_extra_tokens else 1,
                        depends_on=[f"t{d}" for d in sorted(deps)],
                        gold=f"{i:08x}",
                    )
                )
        task = Task(
            id=f"bench-{rng.getrandbits(32):08x}",
            suite="sim",
            split="test",
            family="bench",
            prompt="engine benchmark DAG",
            answer=subtasks[-1].gold,
            subtasks=subtasks,
            budget_usd=1e9,
            budget_s=1e9,
        )
        if width(plan_graph(plan_for(task))) >= min_width:
            return task


def plan_for(task: Task, executor: str = "bench") -> Plan:
    return Plan(
        milestone="benchmark",
        steps=[
            Step(
                id=sub.id,
                executor=executor,
                instruction=f"do {sub.id}",
                depends_on=list(sub.depends_on),
                covers=[sub.id],
            )
            for sub in task.subtasks
        ],
    )


def dispatch_delays(plan: Plan, results: list[StepResult]) -> list[float]:
    """For each step, how long after its last dependency finished it started: the engine's
    per-step overhead."""
    by_id = {r.step_id: r for r in results}
    return [
        by_id[step.id].started_s
        - max((by_id[d].finished_s for d in step.depends_on if d in by_id), default=0.0)
        for step in plan.steps
    ]


def bench_pool(ttft_s: float = BENCH_TTFT_S) -> ExecutorPool:
    profile = ExecutorProfile(
        name="bench",
        backend="sim",
        price_in_per_1m=0.0,
        price_out_per_1m=0.0,
        latency=LatencyModel(
            ttft_s=ttft_s, tokens_per_s=BENCH_TOKENS_PER_S, prefill_tokens_per_s=1e12
        ),
        context_window=1_000_000,
        max_concurrency=1000,
        capability={"arithmetic": {"success": 1.0, "n": 0}},  # type: ignore[dict-item]
    )
    world = SimWorld(SimParams(latency_jitter=0.0))
    return ExecutorPool.from_config(
        PoolConfig(name="bench", executors=[profile]), BackendContext(world=world)
    )


def makespan_ratio(task: Task, pool: ExecutorPool, engine: LocalEngine) -> float:
    """Wall-time makespan of the plan over its critical path (from the steps' own latencies)."""
    plan = plan_for(task)

    async def run() -> float:
        outcome = await engine.execute(plan, pool.session(1e9), task)
        assert all(r.status == "ok" for r in outcome.results), "bench steps must all succeed"
        makespan = max(r.finished_s for r in outcome.results)
        return makespan / critical_path_s(plan, {r.step_id: r.latency_s for r in outcome.results})

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(run())
    finally:
        loop.close()


SIM_DEFAULT_POOL = Path("configs/pools/sim-default.yaml")


WARMUP_EPISODES = 300


def sim_throughput(
    params: Params,
    episodes: int,
    policy: str = "greedy",
    pool_path: Path = SIM_DEFAULT_POOL,
    repeats: int = 3,
) -> dict[str, float | str]:
    """Episodes per second in one process (one core), median of `repeats` runs after a
    warm-up; task generation is timed apart."""
    suite = SimSuite(params.sim)
    pool = load_pool(pool_path, params)
    runner = EpisodeRunner(pool, params, suite.check)
    run_episodes(suite.tasks("train", WARMUP_EPISODES, seed=0), runner, policy, seed=0)
    generation, simulation, steps = [], [], 0
    for repeat in range(repeats):
        started = time.perf_counter()
        tasks = list(suite.tasks("test", episodes, seed=repeat))
        generated = time.perf_counter()
        trajectories = run_episodes(tasks, runner, policy, seed=repeat)
        finished = time.perf_counter()
        generation.append(generated - started)
        simulation.append(finished - generated)
        steps += sum(t.metrics.n_steps for t in trajectories)
    return {
        "sim_policy": policy,
        "sim_episodes_per_s": episodes / statistics.median(simulation),
        "sim_tasks_generated_per_s": episodes / statistics.median(generation),
        "sim_steps_per_episode": steps / (episodes * repeats),
    }


def engine_benchmark(params: Params, runs: int = 5, steps: int = 50, episodes: int = 3000) -> dict:
    # Throughput first, in a fresh process heap; then the wall-time DAG runs.
    throughput = sim_throughput(params, episodes)
    rng = random.Random(0)
    pool = bench_pool()
    tasks = [random_dag_task(steps, 6, rng) for _ in range(runs)]
    figures: dict[str, float | int | str] = {
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        ),
        "dag_steps": steps,
        "dag_runs": runs,
        "dag_min_width": min(width(plan_graph(plan_for(t))) for t in tasks),
    }
    for label, fast in (("task_per_step", False), ("timer_fast_path", True)):
        engine = LocalEngine(max_parallel=None, sync_fast_path=fast)
        ratios = [makespan_ratio(task, pool, engine) for task in tasks]
        figures[f"wall_makespan_over_critical_path_{label}_median"] = statistics.median(ratios)
        figures[f"wall_makespan_over_critical_path_{label}_max"] = max(ratios)
    figures.update(throughput)
    return figures


def baseline_table(
    params: Params, pool_path: str | Path, n: int, seed: int = 0
) -> list[EvalMetrics]:
    """The fixed baselines (not the learned or LLM policies, which need trained models),
    parallel and sequential, on the same test tasks."""
    rows = []
    for policy in BASELINES:
        for sequential in (False, True):
            spec = EvalSpec("sim", policy, pool_path, n, seed, "test", sequential)
            rows.append(evaluate(spec, params)[0])
    return rows


def dispatch_overhead(
    params: Params, pool_path: str, steps: int = 50, dags: int = 5, repeats: int = 40
) -> dict[str, float]:
    """Time for the `graph` dispatcher to assign every step of a `steps`-step DAG: one forward
    pass over the DAG plus the budgeted choice (median over repeats, per DAG; ms)."""
    from easy_core.executors.pool import CostLedger
    from easy_core.policies.graph import GraphPolicy, load_dispatcher
    from easy_core.runtime.policy import EpisodeState

    load_dispatcher(params.policies.graph_model)  # load once, outside the timing
    pool = load_pool(pool_path, params)
    skills = sorted({s for p in pool.profiles for s in p.capability})
    rng = random.Random(0)
    policy = GraphPolicy()
    medians = []
    for _ in range(dags):
        task = random_dag_task(steps, 6, rng)
        for i, sub in enumerate(task.subtasks):
            sub.skill = skills[i % len(skills)]
        task.budget_usd, task.budget_s = 1.0, 1e4
        timings = []
        for _ in range(repeats):
            state = EpisodeState(
                public_task(task), PoolView.of(pool), params, 0, CostLedger(task.budget_usd)
            )
            start = time.perf_counter()
            choose = policy.chooser(state)
            for sub in task.subtasks:
                choose(sub)
            timings.append((time.perf_counter() - start) * 1e3)
        medians.append(statistics.median(timings))
    return {"steps": steps, "median_ms": statistics.median(medians), "max_ms": max(medians)}
