"""Benchmark of release scheduling (`easy bench release`): a workload of many concurrent sim
workflows sharing limited executor capacity, a discrete-event simulation of it driven by a
`runtime.release` scheduler, and P50/P95 flow times of each scheduler at light and heavy load.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from easy_core.core.errors import ConfigError
from easy_core.core.params import Params, ReleaseParams
from easy_core.core.schemas import StepRequest, StepResult
from easy_core.core.stats import quantile
from easy_core.executors.pool import BackendContext, ExecutorPool
from easy_core.policies.baselines import greedy_executor
from easy_core.runtime.release import (
    SCHEDULERS,
    ExecutorState,
    ReleaseScheduler,
    ReleaseStep,
    StepSpec,
    Workflow,
    WorkflowSpec,
    make_scheduler,
)
from easy_core.world.sim_world import SimWorld
from easy_core.world.suites.sim import SimSuite


def load_sim_pool(params: Params, pool_path: str | Path) -> ExecutorPool:
    pool = ExecutorPool.from_yaml(
        pool_path, BackendContext(world=SimWorld(params.sim, params.capability))
    )
    others = [p.name for p in pool.profiles if p.backend != "sim"]
    if others:
        raise ConfigError(
            f"pool {pool.name!r}: the release simulation needs sim executors only; "
            f"not sim: {', '.join(others)}"
        )
    return pool


def build_workflows(
    params: Params, pool: ExecutorPool, n: int, seed: int, split: str = "test"
) -> list[WorkflowSpec]:
    """`n` sim tasks of `split` as workflows, with every step's service time from the world
    (choose release settings on validation, report them on test)."""
    world = SimWorld(params.sim, params.capability)
    profiles = pool.profiles
    by_name = {p.name: p for p in profiles}
    workflows = []
    for task in SimSuite(params.sim).tasks(split, n, seed):
        position = {sub.id: i for i, sub in enumerate(task.subtasks)}
        succs: list[list[int]] = [[] for _ in task.subtasks]
        for i, sub in enumerate(task.subtasks):
            for dep in sub.depends_on:
                succs[position[dep]].append(i)
        results: list[StepResult] = []
        steps = []
        for i, sub in enumerate(task.subtasks):
            executor = greedy_executor(task, task.subtasks[i], profiles, params)
            deps = tuple(position[d] for d in sub.depends_on)
            request = StepRequest(
                step_id=f"{task.id}-{sub.id}",
                instruction=f"Solve {sub.id} ({sub.skill}, difficulty {sub.difficulty}/5).",
                task=task,
                covers=(sub.id,),
                inputs=tuple(results[d] for d in deps),
                seed=seed,
            )
            result = world.simulate(by_name[executor], request)
            results.append(result)
            # A failed call (context overflow) still occupies a server; never zero time.
            service = max(result.latency_s, 1e-3)
            tokens_in = sub.input_tokens + sum(
                task.subtask(d).output_tokens for d in sub.depends_on
            )
            steps.append(
                StepSpec(
                    sub.id,
                    sub.skill,
                    executor,
                    service,
                    deps,
                    tuple(succs[i]),
                    tokens_in,
                    sub.output_tokens,
                )
            )
        workflows.append(WorkflowSpec(task.id, task.family, tuple(steps)))
    return workflows


def servers_per_executor(pool: ExecutorPool, capacity_scale: float) -> dict[str, int]:
    return {p.name: max(1, round(p.max_concurrency * capacity_scale)) for p in pool.profiles}


def arrival_rate(workflows: Sequence[WorkflowSpec], servers: dict[str, int], load: float) -> float:
    """The Poisson rate at which the busiest executor runs at utilisation `load`."""
    work = dict.fromkeys(servers, 0.0)
    for wf in workflows:
        for step in wf.steps:
            work[step.executor] += step.service_s
    n = len(workflows)
    worst = max(work[name] / n / servers[name] for name in servers)
    return load / worst


def arrival_times(rate: float, n: int, seed: int) -> list[float]:
    """Poisson arrivals; the same unit draws at every rate (common random numbers)."""
    rng = random.Random(f"release-arrivals|{seed}")
    t, times = 0.0, []
    for _ in range(n):
        t += rng.expovariate(1.0) / rate
        times.append(t)
    return times


@dataclass
class ReleaseRun:
    """What one simulation run produced. `flow_s[i]` is workflow i's finish minus arrival."""

    scheduler: str
    workflows: list[Workflow]
    executors: dict[str, ExecutorState]
    flow_s: list[float]
    makespan_s: float

    @property
    def p50(self) -> float:
        return quantile(self.flow_s, 0.5)

    @property
    def p95(self) -> float:
        return quantile(self.flow_s, 0.95)

    @property
    def mean(self) -> float:
        return sum(self.flow_s) / len(self.flow_s)

    @property
    def throughput(self) -> float:
        """Workflows finished per second from the first arrival to the last finish."""
        first = min(wf.arrival_s for wf in self.workflows)
        return len(self.workflows) / (self.makespan_s - first)

    def utilisation(self, executor: str | None = None) -> float:
        """Busy server-seconds over available server-seconds (all executors, or one)."""
        states = [self.executors[executor]] if executor else list(self.executors.values())
        busy = sum(s.busy_s for s in states)
        return busy / (sum(s.servers for s in states) * self.makespan_s)


_ARRIVE, _DISPATCHED, _FINISH = 0, 1, 2


def simulate_release(
    workflows: Sequence[WorkflowSpec],
    arrivals: Sequence[float],
    servers: dict[str, int],
    scheduler: ReleaseScheduler,
    dispatch_s: float = 0.0,
) -> ReleaseRun:
    """Run every workflow to completion under `scheduler`; a heap of timed events, ties broken
    by insertion order, so a run is a pure function of its inputs."""
    executors = {name: ExecutorState(name, count) for name, count in servers.items()}
    runs = [
        Workflow(
            i,
            spec,
            arrivals[i],
            [ReleaseStep(i, k, s, len(s.deps)) for k, s in enumerate(spec.steps)],
        )
        for i, spec in enumerate(workflows)
    ]
    events: list[tuple[float, int, int, object]] = []
    seq = 0

    def push(time: float, kind: int, payload: object) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (time, seq, kind, payload))

    def pump(ex: ExecutorState, now: float) -> None:
        while (step := scheduler.choose(ex, now)) is not None:
            step.released_s = now
            ex.in_transit += 1
            push(now + dispatch_s, _DISPATCHED, step)

    def start_queued(ex: ExecutorState, now: float) -> None:
        while ex.busy < ex.servers and ex.queue:
            step = ex.queue.popleft()
            ex.busy += 1
            ex.max_busy = max(ex.max_busy, ex.busy)
            step.started_s = now
            starved = now - ex.idle_marks.popleft() if ex.idle_marks else 0.0
            scheduler.started(step, ex, now - step.arrived_s, starved)
            push(now + step.spec.service_s, _FINISH, step)

    def mark_idle(ex: ExecutorState, now: float) -> None:
        """Note servers left idle while the scheduler holds work for them back."""
        backlog = min(ex.servers - ex.busy, scheduler.held(ex.name))
        while len(ex.idle_marks) < backlog:
            ex.idle_marks.append(now)

    def make_ready(step: ReleaseStep, wf: Workflow, now: float) -> None:
        step.ready_s = now
        scheduler.ready(step, wf, now)
        pump(executors[step.executor], now)

    for wf in runs:
        push(wf.arrival_s, _ARRIVE, wf)
    now = 0.0
    while events:
        now, _, kind, payload = heapq.heappop(events)
        if kind == _ARRIVE:
            wf = payload  # type: ignore[assignment]
            for step in wf.steps:
                if not step.waiting_deps:
                    make_ready(step, wf, now)
        elif kind == _DISPATCHED:
            step = payload  # type: ignore[assignment]
            ex = executors[step.executor]
            ex.in_transit -= 1
            step.arrived_s = now
            ex.queue.append(step)
            start_queued(ex, now)
        else:
            step = payload  # type: ignore[assignment]
            ex = executors[step.executor]
            ex.busy -= 1
            ex.busy_s += step.spec.service_s
            step.finished_s = now
            scheduler.finished(step, ex, now)
            wf = runs[step.workflow]
            wf.done += 1
            if wf.done == len(wf.steps):
                wf.finish_s = now
                scheduler.workflow_finished(wf, now)
            start_queued(ex, now)
            mark_idle(ex, now)
            pump(ex, now)
            for j in step.spec.succs:
                succ = wf.steps[j]
                succ.waiting_deps -= 1
                if not succ.waiting_deps:
                    make_ready(succ, wf, now)
    return ReleaseRun(
        scheduler=scheduler.name,
        workflows=runs,
        executors=executors,
        flow_s=[wf.finish_s - wf.arrival_s for wf in runs],
        makespan_s=now,
    )


def release_benchmark(
    params: Params,
    pool_path: str | Path,
    n_workflows: int = 2000,
    loads: Sequence[float] = (0.5, 0.9),
    seed: int = 0,
    release: ReleaseParams | None = None,
    schedulers: Sequence[str] = SCHEDULERS,
    split: str = "test",
) -> list[dict]:
    """Flow-time statistics of each scheduler at each load, on the same workflows and the same
    arrival draws (only the rate changes with the load)."""
    release = release or params.release
    pool = load_sim_pool(params, pool_path)
    workflows = build_workflows(params, pool, n_workflows, seed, split)
    servers = servers_per_executor(pool, release.capacity_scale)
    rows = []
    for load in loads:
        rate = arrival_rate(workflows, servers, load)
        arrivals = arrival_times(rate, n_workflows, seed)
        for name in schedulers:
            scheduler = make_scheduler(name, pool.profiles, release)
            run = simulate_release(workflows, arrivals, servers, scheduler, release.dispatch_s)
            rows.append(
                {
                    "load": load,
                    "scheduler": name,
                    "n": n_workflows,
                    "rate_per_s": rate,
                    "p50": run.p50,
                    "p95": run.p95,
                    "p99": quantile(run.flow_s, 0.99),
                    "mean": run.mean,
                    "throughput": run.throughput,
                    "utilisation": run.utilisation(),
                    "max_utilisation": max(run.utilisation(e) for e in servers),
                }
            )
    return rows


def release_markdown(rows: Sequence[dict]) -> str:
    """P50 and P95 flow time per load: eager, tail_risk, and tail_risk's relative change."""
    by_load: dict[float, dict[str, dict]] = {}
    for row in rows:
        by_load.setdefault(row["load"], {})[row["scheduler"]] = row
    lines = [
        "| load | P50 eager (s) | P50 tail_risk (s) | P50 change | "
        "P95 eager (s) | P95 tail_risk (s) | P95 change |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for load in sorted(by_load):
        eager = by_load[load].get("eager")
        tail = by_load[load].get("tail_risk")
        if eager is None or tail is None:
            continue
        cells = [f"{load:g}"]
        for stat in ("p50", "p95"):
            change = (tail[stat] - eager[stat]) / eager[stat]
            cells += [f"{eager[stat]:.2f}", f"{tail[stat]:.2f}", f"{change:+.1%}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
