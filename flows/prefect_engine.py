"""A plan engine on Prefect: the local engine's scheduling and resilience, with every executor
call a Prefect task run (named `STEP-EXECUTOR`) on the flow's task runner, and its result coming
back as the task run's result.

Everything but the call stays in the flow's process, in `easy_core.runtime.local_engine`: a step
starts when its own dependencies finish, its worst-case cost is reserved in the ledger first, it
waits for a slot of its executor, its call is bounded by the profile-based timeout, a failed call
is retried with backoff or falls back to the next capable executor, circuit breakers skip an
executor that keeps failing, and the time budget cancels what is still running. So the engine
runs on the thread pool task runner and on a Dask task runner (prefect-dask) alike: a call ships
the executor and the request to the worker and its `StepResult` back; nothing is shared between
processes. Executors that hold in-process models (backend `hf`) stay on the thread pool.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.context import SyncClientContext

from easy_core.core.clock import Clock
from easy_core.core.params import Params
from easy_core.core.schemas import Plan, Step, StepRequest, StepResult, Task
from easy_core.executors.base import Executor
from easy_core.executors.pool import PoolSession
from easy_core.runtime.local_engine import LocalEngine
from easy_core.runtime.scheduler import PlanOutcome

_local = threading.local()


def _runner() -> asyncio.Runner:
    """One event loop per worker thread, kept across calls: a fresh loop per call costs
    milliseconds that land on every step of the critical path."""
    if getattr(_local, "runner", None) is None:
        _local.runner = asyncio.Runner()
    return _local.runner


@task(persist_result=False, cache_policy=NO_CACHE)
def call_executor(executor: Executor, request: StepRequest, timeout_s: float) -> StepResult:
    """One executor call, where the task runner puts it (a thread, a Dask worker), bounded by
    the engine's timeout there too (a hung call must not hold a worker). A raised error
    travels back as the task run's exception and counts as a failed call, as in process."""
    return _runner().run(asyncio.wait_for(executor.run(request), timeout_s))


class PrefectEngine(LocalEngine):
    """Drop-in for LocalEngine inside a Prefect flow; the flow's task runner decides where and
    how many calls run at once."""

    def __init__(
        self,
        step_timeout_s: float = 300.0,
        params: Params | None = None,
    ):
        params = params or Params()
        super().__init__(
            step_timeout_s=step_timeout_s,
            sync_fast_path=False,  # every call is a task run, simulated ones too
            resilience=params.resilience,
            difficulty_slope=params.capability.difficulty_slope,
            step_timeout_factor=params.runtime.step_timeout_factor,
        )
        self.call_overhead_s = params.pipeline.call_overhead_s

    @classmethod
    def from_params(cls, params: Params) -> PrefectEngine:
        return cls(step_timeout_s=params.runtime.step_timeout_s, params=params)

    async def call(
        self, executor: Executor, step: Step, request: StepRequest, timeout_s: float
    ) -> StepResult:
        named = call_executor.with_options(task_run_name=f"{step.id}-{executor.profile.name}")
        # Plain arguments: a Dask worker receives them pickled (an annotation such as
        # `quote` would reach it wrapped).
        future = named.submit(executor, request, timeout_s)
        return await asyncio.to_thread(future.result)

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
        # One API client for every step's task run (the calls' tasks inherit this context),
        # where each task run would otherwise build its own (~20 ms of CPU each).
        with SyncClientContext.get_or_create():
            return await super().execute(
                plan,
                session,
                task,
                seed=seed,
                prior=prior,
                origin=origin,
                deadline=deadline,
                clock=clock,
            )
