"""Executor profiling: measure each executor's success per domain (with its count and Wilson
interval), tokens, latency and cost, and write them where the pool reads them.

Each executor solves subtasks of training tasks alone, with correct prerequisite results in its
context. For the sim backend that is the capability the simulator draws outcomes from (every
subtask); a real executor is measured on the domains its pool entry declares (a retrieval tool
is not asked to write code), by the suite's own subtask checker, and a latency model is fitted to
its calls (least squares of latency on output tokens: intercept = time to first token).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Container, Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

import yaml
from pydantic import BaseModel

from easy_core.core.config import load_yaml_model
from easy_core.core.errors import ConfigError
from easy_core.core.schemas import (
    DomainCapability,
    LatencyModel,
    MeasuredExecutor,
    MeasuredProfile,
    StepRequest,
    StepResult,
    Subtask,
    Task,
)
from easy_core.core.stats import mean, wilson_interval
from easy_core.core.storage import atomic_write_text
from easy_core.executors.pool import ExecutorPool
from easy_core.world.suites import Suite


class DomainMeasurement(BaseModel):
    executor: str
    domain: str
    n: int
    success: float
    ci95: tuple[float, float]
    mean_tokens_in: float
    mean_tokens_out: float
    mean_latency_s: float
    mean_cost_usd: float


# A recording's inputs: (task id, subtask id) -> the result a prerequisite delivers instead of
# its gold answer (`recording`: a right output an executor recorded on it).
GivenInputs = Mapping[tuple[str, str], StepResult]


def _context(
    task: Task, subtask_id: str, given: GivenInputs | None = None
) -> tuple[StepResult, ...]:
    sub = task.subtask(subtask_id)
    return tuple(
        given[task.id, dep].model_copy(update={"step_id": f"given-{dep}"})
        if given and (task.id, dep) in given
        else StepResult(
            step_id=f"given-{dep}",
            executor="given",
            status="ok",
            output=task.subtask(dep).gold
            if task.suite != "sim"
            else f"{dep}={task.subtask(dep).gold}",
            tokens_out=task.subtask(dep).output_tokens,
            sub_answers={dep: task.subtask(dep).gold},
        )
        for dep in sub.depends_on
    )


Sample = tuple[bool, StepResult]
SubtaskChecker = Callable[[Task, Subtask, str], bool]


def _request(
    task: Task, sub: Subtask, max_output_tokens: int, seed: int, given: GivenInputs | None = None
) -> StepRequest:
    return StepRequest(
        step_id=f"profile-{sub.id}",
        instruction=sub.instruction or f"Solve {sub.id}.",
        task=task,
        covers=(sub.id,),
        inputs=_context(task, sub.id, given),
        max_output_tokens=max_output_tokens,
        seed=seed,
    )


async def run_subtask(
    executor: object, task: Task, sub: Subtask, seed: int, given: GivenInputs | None = None
) -> StepResult:
    """The executor on one subtask alone, with its gold prerequisites as inputs (or the results
    `given` names); the call's wall time when the backend does not report a latency."""
    profile = executor.profile  # type: ignore[attr-defined]
    started = time.monotonic()
    request = _request(task, sub, profile.max_output_tokens, seed, given)
    result = await executor.run(request)  # type: ignore[attr-defined]
    if not result.latency_s:
        result.latency_s = time.monotonic() - started
    return result


class Outcome(NamedTuple):
    executor: str
    task: Task
    subtask: Subtask
    result: StepResult
    correct: bool


def real_outcomes(
    pool: ExecutorPool,
    work: list[tuple[Task, SubtaskChecker]],
    seed: int,
    on_sample: Callable[[], None] | None = None,
    at_once: int = 1,
    given: GivenInputs | None = None,
    only: Container[tuple[str, str]] | None = None,
    spare: bool = False,
) -> list[Outcome]:
    """Every executor on the subtasks of the tasks in `work` (those in `only`, if given), in the
    domains its pool entry declares, checked by the suite; with `spare`, also the subtasks any
    answer passes (a replay needs their rows; a profile must not count them). `at_once`
    executors at a time (1: CPU models would otherwise share the cores; 2 on 2 cores when each
    server has one thread), each executor's calls concurrent up to its `max_concurrency` (a
    server's parallel slots, an in-process model's batch). Prerequisites are gold unless `given`
    delivers them."""
    if at_once < 1:
        raise ConfigError(f"executors at once must be at least 1 (got {at_once})")

    async def measure(name: str, executor: object) -> list[Outcome]:
        slots = asyncio.Semaphore(executor.profile.max_concurrency)  # type: ignore[attr-defined]
        declared = set(executor.profile.capability)  # type: ignore[attr-defined]

        async def one(task: Task, sub: Subtask, check: SubtaskChecker) -> Outcome:
            async with slots:
                result = await run_subtask(executor, task, sub, seed, given)
            if on_sample is not None:
                on_sample()
            ok = result.status == "ok" and check(task, sub, result.output)
            return Outcome(name, task, sub, result, ok)

        return list(
            await asyncio.gather(
                *(
                    one(task, sub, check)
                    for task, check in work
                    for sub in task.subtasks
                    if sub.skill in declared
                    and (spare or informative(task, sub))
                    and (only is None or (task.id, sub.id) in only)
                )
            )
        )

    # Lanes that run side by side, each its executors one after another; the dearest (the
    # slowest, on a ladder whose prices follow parameter count) spread across the lanes.
    lanes: list[list[str]] = [[] for _ in range(at_once)]
    load = [0.0] * at_once
    for profile in sorted(pool.profiles, key=lambda p: -(p.price_in_per_1m + p.price_out_per_1m)):
        lane = load.index(min(load))
        lanes[lane].append(profile.name)
        load[lane] += profile.price_in_per_1m + profile.price_out_per_1m

    async def lane(names: list[str]) -> list[Outcome]:
        outcomes: list[Outcome] = []
        for name in names:
            outcomes += await measure(name, pool.executors[name])
        return outcomes

    async def measure_all() -> list[list[Outcome]]:
        return list(await asyncio.gather(*(lane(names) for names in lanes)))

    by_name: dict[str, list[Outcome]] = defaultdict(list)
    for rows in asyncio.run(measure_all()):
        for outcome in rows:
            by_name[outcome.executor].append(outcome)
    return [o for name in pool.executors for o in by_name[name]]  # in the pool's order


def subtask_checker(name: str, suite: Suite, purpose: str) -> SubtaskChecker:
    """The suite's check of one step's output on one subtask, which real executors are
    measured by; a clear error where the suite has none (`purpose`: what it was wanted for)."""
    check = getattr(suite, "check_subtask", None)
    if check is None:
        raise ConfigError(
            f"suite {name!r} cannot check single subtasks, so {purpose}; use math, "
            "math-compound, research, code or embodied"
        )
    return check


def informative(task: Task, subtask: Subtask) -> bool:
    """Whether a subtask measures anything: a suite marks the ones any answer passes (the
    spare moves of a TextWorld game after it is won) with `metadata["uninformative"]`."""
    return subtask.id not in task.metadata.get("uninformative", ())


def fit_latency(results: list[StepResult]) -> LatencyModel | None:
    """Least squares of latency on output tokens; None when the calls cannot separate the two
    (fewer than 3, or all of one length)."""
    points = [(r.tokens_out, r.latency_s) for r in results if r.status == "ok" and r.tokens_out]
    if len(points) < 3:
        return None
    xs, ys = [x for x, _ in points], [y for _, y in points]
    try:
        slope, intercept = statistics.linear_regression(xs, ys)
    except statistics.StatisticsError:  # every call produced the same number of tokens
        return None
    if slope <= 0:  # tools: latency does not grow with output
        mx, my = mean(xs), mean(ys)
        return LatencyModel(ttft_s=round(my, 4), tokens_per_s=round(mx / max(my, 1e-6), 1))
    return LatencyModel(ttft_s=round(max(0.0, intercept), 4), tokens_per_s=round(1 / slope, 2))


def summarize_outcomes(
    outcomes: Iterable[tuple[str, str, bool, StepResult]],
) -> tuple[list[DomainMeasurement], dict[str, LatencyModel]]:
    """(executor, domain, correct, result) samples as success per (executor, domain) and a
    latency model per executor."""
    samples: dict[tuple[str, str], list[Sample]] = defaultdict(list)
    calls: dict[str, list[StepResult]] = defaultdict(list)
    for executor, domain, correct, result in outcomes:
        samples[executor, domain].append((correct, result))
        calls[executor].append(result)
    latencies = {
        name: fitted
        for name, results in calls.items()
        if (fitted := fit_latency(results)) is not None
    }
    return _summarize(samples), latencies


def measure_real_pool(
    pool: ExecutorPool,
    tasks: list[tuple[Task, SubtaskChecker]],
    seed: int,
    on_sample: Callable[[], None] | None = None,
) -> tuple[list[DomainMeasurement], dict[str, LatencyModel]]:
    """Every executor on the subtasks of `tasks` (`real_outcomes`), summarised."""
    outcomes = real_outcomes(pool, tasks, seed, on_sample)
    return summarize_outcomes((o.executor, o.subtask.skill, o.correct, o.result) for o in outcomes)


def measured_profile(
    pool: ExecutorPool,
    measurements: list[DomainMeasurement],
    latencies: dict[str, LatencyModel],
    suites: list[str],
    n_tasks: int,
    seed: int,
) -> MeasuredProfile:
    executors: dict[str, MeasuredExecutor] = {}
    for m in measurements:
        entry = executors.setdefault(
            m.executor, MeasuredExecutor(latency=latencies.get(m.executor))
        )
        entry.capability[m.domain] = DomainCapability(success=round(m.success, 4), n=m.n)
    return MeasuredProfile(
        pool=pool.name, suites=suites, n_tasks=n_tasks, seed=seed, executors=executors
    )


def merged(old: MeasuredProfile, new: MeasuredProfile) -> MeasuredProfile:
    """`new` over `old`: a profile can be measured one suite at a time."""
    executors = {name: entry.model_copy(deep=True) for name, entry in old.executors.items()}
    for name, entry in new.executors.items():
        previous = executors.get(name)
        if previous is None:
            executors[name] = entry
            continue
        previous.capability.update(entry.capability)
        if entry.latency is not None:
            previous.latency = entry.latency
    suites = old.suites + [s for s in new.suites if s not in old.suites]
    return new.model_copy(update={"executors": executors, "suites": suites})


def write_profile(path: str | Path, profile: MeasuredProfile) -> Path:
    """Write `profile`, merged over the profile already at `path` for the same pool."""
    if Path(path).is_file():
        old = load_yaml_model(path, MeasuredProfile)
        if old.pool == profile.pool:
            profile = merged(old, profile)
    return atomic_write_text(
        path, yaml.safe_dump(profile.model_dump(mode="json", exclude_none=True), sort_keys=False)
    )


def measure_pool(pool: ExecutorPool, tasks: list[Task], seed: int) -> list[DomainMeasurement]:
    samples: dict[tuple[str, str], list[Sample]] = defaultdict(list)
    for name, executor in pool.executors.items():
        simulate = getattr(executor, "simulate", None)
        if simulate is None:
            raise TypeError(f"executor {name!r}: only simulating executors are profiled here")
        for task in tasks:
            for sub in task.subtasks:
                request = StepRequest(
                    step_id=f"profile-{sub.id}",
                    instruction=f"Solve {sub.id}.",
                    task=task,
                    covers=(sub.id,),
                    inputs=_context(task, sub.id),
                    max_output_tokens=executor.profile.max_output_tokens,
                    seed=seed,
                )
                result = simulate(request)
                correct = result.sub_answers.get(sub.id) == sub.gold
                samples[name, sub.skill].append((correct, result))
    return _summarize(samples)


def _summarize(samples: dict[tuple[str, str], list[Sample]]) -> list[DomainMeasurement]:
    measurements = []
    for (name, domain), rows in sorted(samples.items()):
        successes = sum(ok for ok, _ in rows)
        measurements.append(
            DomainMeasurement(
                executor=name,
                domain=domain,
                n=len(rows),
                success=successes / len(rows),
                ci95=wilson_interval(successes, len(rows)),
                mean_tokens_in=mean([r.tokens_in for _, r in rows]),
                mean_tokens_out=mean([r.tokens_out for _, r in rows]),
                mean_latency_s=mean([r.latency_s for _, r in rows]),
                mean_cost_usd=mean([r.cost_usd for _, r in rows]),
            )
        )
    return measurements


def measurements_markdown(measurements: list[DomainMeasurement]) -> str:
    lines = [
        "| executor | domain | n | success | 95% CI | latency s | tokens out | cost $ |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in measurements:
        lines.append(
            f"| {m.executor} | {m.domain} | {m.n} | {m.success:.3f} | "
            f"{m.ci95[0]:.3f}-{m.ci95[1]:.3f} | {m.mean_latency_s:.2f} | "
            f"{m.mean_tokens_out:.0f} | {m.mean_cost_usd:.6f} |"
        )
    return "\n".join(lines) + "\n"


def profile_pool(
    pool: ExecutorPool,
    suites: list[tuple[str, Suite]],
    n_tasks: int,
    seed: int,
    on_sample: Callable[[], None] | None = None,
) -> tuple[MeasuredProfile, list[DomainMeasurement]]:
    """Profile `pool` on `n_tasks` training tasks of each suite: simulating executors by
    simulation, real ones by calling them (their suites must check single subtasks)."""
    names = [name for name, _ in suites]
    if all(hasattr(e, "simulate") for e in pool.executors.values()):
        tasks = [t for _, suite in suites for t in suite.tasks("train", n_tasks, seed)]
        measurements, latencies = measure_pool(pool, tasks, seed), {}
    else:
        work = []
        for name, suite in suites:
            check = subtask_checker(name, suite, "it cannot profile real executors")
            work += [(t, check) for t in suite.tasks("train", n_tasks, seed)]
        measurements, latencies = measure_real_pool(pool, work, seed, on_sample)
    profile = measured_profile(pool, measurements, latencies, names, n_tasks, seed)
    return profile, measurements
