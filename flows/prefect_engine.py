"""A plan engine on Prefect: one Prefect task per step, submitted with its dependencies' futures
(`wait_for` semantics), so independent steps run concurrently on the flow's task runner and every
step is a task run named `STEP-EXECUTOR` in the UI.

Same interface and rules as easy_core's LocalEngine: placeholders filled from dependency outputs,
the worst-case cost reserved before a step starts (a step that would pass the budget is skipped
and nothing new starts), per-executor concurrency limits, a per-step timeout, dependents of a
failed step skipped with the reason, and no step started past the time budget. Unlike the local
engine it does not cancel steps already running at the deadline.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.context import SyncClientContext
from prefect.utilities.annotations import quote

from easy_core.core.clock import Clock
from easy_core.core.schemas import Plan, Step, StepResult, Task
from easy_core.executors.pool import PoolSession
from easy_core.plans.validation import critical_path_s, topological_order
from easy_core.runtime.resilience import executor_error_result, timed_out_result
from easy_core.runtime.scheduler import (
    PlanOutcome,
    StopReason,
    blocked_reason,
    build_request,
    estimate_call,
    skipped_result,
)


@dataclass
class _Shared:
    """State the step tasks of one plan share across the task runner's threads."""

    session: PoolSession
    task: Task
    seed: int
    prior: Mapping[str, StepResult]
    origin: float
    deadline: float | None
    step_timeout_s: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    slots: dict[str, threading.Semaphore] = field(default_factory=dict)
    stop_reason: StopReason | None = None
    stop_detail: str = ""
    results: dict[str, StepResult] = field(default_factory=dict)

    def stop(self, reason: StopReason, detail: str) -> None:
        with self.lock:
            if self.stop_reason is None:
                self.stop_reason, self.stop_detail = reason, detail


def _now() -> float:
    return time.monotonic()  # the clock asyncio loops use, shared by every thread


_local = threading.local()


def _thread_runner() -> asyncio.Runner:
    """One event loop per task-runner thread, kept across steps: a fresh loop per step
    (asyncio.run) costs milliseconds of CPU that land on every step of the critical path."""
    if getattr(_local, "runner", None) is None:
        _local.runner = asyncio.Runner()
    return _local.runner


@task(persist_result=False, cache_policy=NO_CACHE)
def run_step(step: Step, shared: _Shared) -> StepResult:
    """Runs once its dependencies' task runs are done (`wait_for`); their results are in
    `shared.results`."""
    result = _run_step(step, shared)
    with shared.lock:
        shared.results[step.id] = result
    return result


def _run_step(step: Step, shared: _Shared) -> StepResult:
    def result_of(step_id: str) -> StepResult:
        return shared.results.get(step_id) or shared.prior[step_id]

    now = _now() - shared.origin
    blocked = blocked_reason(step, result_of)
    if blocked is not None:
        return skipped_result(step, blocked, now)
    if shared.stop_reason is not None:
        return skipped_result(step, f"not started: {shared.stop_reason}", now)
    if shared.deadline is not None and _now() >= shared.deadline:
        shared.stop("time_budget", "time budget reached")
        return skipped_result(step, "time budget reached", now)
    session = shared.session
    executor = session.executor(step.executor)
    inputs = tuple(result_of(dep) for dep in step.depends_on)
    request = build_request(
        step, inputs, shared.task, shared.seed, executor.profile.max_output_tokens
    )
    bound, _ = estimate_call(request, executor)
    with shared.lock:
        reserved = session.ledger.try_reserve(bound)
        remaining = session.ledger.remaining_usd
    if not reserved:
        detail = (
            f"step {step.id!r} on {step.executor} could cost up to ${bound:.6f}, but only "
            f"${remaining:.6f} of the ${session.ledger.budget_usd:.6f} budget is left"
        )
        shared.stop("cost_budget", detail)
        return skipped_result(step, "cost budget: " + detail, now)
    with shared.slots[step.executor]:
        started = _now()
        try:
            call = asyncio.wait_for(executor.run(request), shared.step_timeout_s)
            result = _thread_runner().run(call)
        except TimeoutError:
            result = timed_out_result(step, request, executor, shared.step_timeout_s)
        except Exception as exc:  # an executor bug must not take the flow down
            result = executor_error_result(step, request, exc)
        finished = _now()
    with shared.lock:
        charged = session.ledger.settle(step.id, step.executor, bound, result.cost_usd)
    return result.model_copy(
        update={
            "step_id": step.id,
            "cost_usd": charged,
            "covers": list(step.covers or ()),
            "started_s": started - shared.origin,
            "finished_s": finished - shared.origin,
        }
    )


class PrefectEngine:
    """Drop-in for LocalEngine inside a Prefect flow (the flow's task runner sets how many
    steps run at once)."""

    def __init__(self, step_timeout_s: float = 300.0):
        self.step_timeout_s = step_timeout_s

    async def execute(
        self,
        plan: Plan,
        session: PoolSession,
        task: Task,
        *,
        seed: int = 0,
        prior: Mapping[str, StepResult] | None = None,
        origin: float | None = None,
        deadline: float | None = None,
        clock: Clock | None = None,
    ) -> PlanOutcome:
        if clock is not None and not isinstance(clock, asyncio.AbstractEventLoop):
            raise TypeError("the Prefect engine runs in wall time on an asyncio loop")
        shared = _Shared(
            session=session,
            task=task,
            seed=seed,
            prior=prior or {},
            origin=_now() if origin is None else origin,
            deadline=deadline,
            step_timeout_s=self.step_timeout_s,
            slots={
                name: threading.Semaphore(executor.profile.max_concurrency)
                for name, executor in session.pool.executors.items()
            },
        )
        steps = {step.id: step for step in plan.steps}
        futures = {}
        # One API client for every step's task run: the worker threads inherit this context,
        # where each task run would otherwise build its own client (an SSL context and a
        # connection pool, ~20 ms of CPU that queues when a whole DAG level starts at once).
        with SyncClientContext.get_or_create():
            for step_id in topological_order(plan) or []:
                step = steps[step_id]
                upstream = [futures[dep] for dep in step.depends_on if dep in futures]
                futures[step_id] = run_step.with_options(
                    task_run_name=f"{step.id}-{step.executor}"
                ).submit(step, quote(shared), wait_for=upstream)  # quote: not traversed
            await asyncio.to_thread(lambda: [future.wait() for future in futures.values()])
        ordered = [shared.results[step.id] for step in plan.steps]
        return PlanOutcome(
            ordered,
            shared.stop_reason,
            shared.stop_detail,
            critical_path_s(plan, {r.step_id: r.latency_s for r in ordered}),
        )
