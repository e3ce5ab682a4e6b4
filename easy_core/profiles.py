"""Executor profiling: measure each executor's success per domain (with its count and Wilson
interval), tokens, latency and cost, and write a pool file with the measured capabilities.

For the sim backend each executor solves every subtask of a set of training tasks alone, with
correct prerequisite results in its context: the capability the simulator draws outcomes from.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import yaml
from pydantic import BaseModel

from easy_core.executors.base import StepRequest
from easy_core.executors.pool import ExecutorPool
from easy_core.schemas import DomainCapability, PoolConfig, StepResult, Task
from easy_core.stats import mean, wilson_interval
from easy_core.storage import atomic_write_text


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


def _context(task: Task, subtask_id: str) -> tuple[StepResult, ...]:
    sub = task.subtask(subtask_id)
    return tuple(
        StepResult(
            step_id=f"given-{dep}",
            executor="given",
            status="ok",
            output=f"{dep}={task.subtask(dep).gold}",
            tokens_out=task.subtask(dep).output_tokens,
            sub_answers={dep: task.subtask(dep).gold},
        )
        for dep in sub.depends_on
    )


def measure_pool(pool: ExecutorPool, tasks: list[Task], seed: int) -> list[DomainMeasurement]:
    samples: dict[tuple[str, str], list[tuple[bool, StepResult]]] = defaultdict(list)
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


def measured_pool(config: PoolConfig, measurements: list[DomainMeasurement]) -> PoolConfig:
    """The pool with each executor's capability replaced by what was measured."""
    by_executor: dict[str, dict[str, DomainCapability]] = defaultdict(dict)
    for m in measurements:
        by_executor[m.executor][m.domain] = DomainCapability(success=round(m.success, 4), n=m.n)
    return config.model_copy(
        update={
            "name": f"{config.name}-measured",
            "description": f"{config.name} with capabilities measured by `easy` profiling",
            "executors": [
                p.model_copy(update={"capability": by_executor.get(p.name, p.capability)})
                for p in config.executors
            ],
        }
    )


def write_pool(path: str | Path, config: PoolConfig) -> Path:
    return atomic_write_text(
        path, yaml.safe_dump(config.model_dump(mode="json", exclude_none=True), sort_keys=False)
    )


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
