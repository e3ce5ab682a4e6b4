"""The local DAG engine: runs one plan's steps on asyncio, each the moment its own dependencies
finish (LLMCompiler's task fetching unit; no level barriers).

Per step: placeholders `{id}` are filled from dependency outputs, the worst-case cost is
reserved in the ledger before the step is launched (a step that would pass the budget never
starts), it waits FIFO for a slot of its executor, runs bounded by a timeout, then settles its
real cost and frees the slot. A step whose dependency failed or was skipped is skipped with the
reason. The time budget is a deadline on the loop's clock: past it, steps in flight are cancelled
(a started step is charged its input) and nothing new starts.

Two ways to run a step, with one scheduler around them:
- an executor's async `run()` in its own task (every backend);
- for deterministic executors that can `simulate()` a step synchronously (the sim backend), a
  single timer on the loop's clock at the modelled finish time: no task, no coroutine. This is
  what makes the virtual-time simulator fast; `sync_fast_path=False` forces the general path,
  and the tests check that both give identical results.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from easy_core.executors.base import Executor, StepRequest
from easy_core.executors.pool import ExecutorSlots, PoolSession
from easy_core.graph import substitute_placeholders
from easy_core.schemas import Plan, Step, StepResult, Task

StopReason = Literal["cost_budget", "time_budget"]


@dataclass
class PlanOutcome:
    results: list[StepResult]
    stop_reason: StopReason | None = None
    stop_detail: str = ""


@dataclass(eq=False)
class _Flight:
    """A launched step: waiting for a slot, or running."""

    step: Step
    request: StepRequest
    executor: Executor
    bound: float
    slots: ExecutorSlots
    has_slot: bool = False
    started: float | None = None
    start: Callable[[], None] | None = None
    timer: asyncio.TimerHandle | None = None
    task: asyncio.Task[StepResult] | None = None


@dataclass
class _Run:
    plan: Plan
    session: PoolSession
    task: Task
    seed: int
    prior: Mapping[str, StepResult]
    origin: float
    results: dict[str, StepResult] = field(default_factory=dict)

    def result_of(self, step_id: str) -> StepResult:
        return self.results.get(step_id) or self.prior[step_id]


def _failed(step: Step, error: str, covers: tuple[str, ...], **fields: float) -> StepResult:
    return StepResult(
        step_id=step.id,
        executor=step.executor,
        status="failed",
        error=error,
        covers=list(covers),
        **fields,  # type: ignore[arg-type]
    )


def _skipped(step: Step, reason: str, now: float) -> StepResult:
    return StepResult(
        step_id=step.id,
        executor=step.executor,
        status="skipped",
        error=reason,
        covers=list(step.covers or ()),
        started_s=now,
        finished_s=now,
    )


class LocalEngine:
    """`max_parallel=1` runs the same plans one step at a time (the `--sequential` switch)."""

    def __init__(
        self,
        step_timeout_s: float = 300.0,
        max_parallel: int | None = None,
        sync_fast_path: bool = True,
    ):
        if max_parallel is not None and max_parallel < 1:
            raise ValueError("max_parallel must be at least 1 or None")
        self.step_timeout_s = step_timeout_s
        self.max_parallel = max_parallel
        self.sync_fast_path = sync_fast_path

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
    ) -> PlanOutcome:
        """Run a validated plan. `origin` is the loop time the episode started (result times are
        relative to it); `deadline` is the loop time at which the time budget runs out."""
        loop = asyncio.get_running_loop()
        run = _Run(
            plan, session, task, seed, prior or {}, loop.time() if origin is None else origin
        )
        steps = plan.steps
        index = {step.id: i for i, step in enumerate(steps)}
        waiting = dict.fromkeys(index, 0)
        children: dict[str, list[str]] = {step.id: [] for step in steps}
        for step in steps:
            for dep in step.depends_on:
                if dep in index:
                    waiting[step.id] += 1
                    children[dep].append(step.id)
        ready = [index[sid] for sid, count in waiting.items() if count == 0]
        heapq.heapify(ready)
        in_flight: dict[str, _Flight] = {}
        completed: list[tuple[_Flight, StepResult]] = []
        wake: list[asyncio.Future[None]] = []
        past_deadline: list[bool] = []
        stop_reason: StopReason | None = None
        stop_detail = ""

        def wake_up() -> None:
            if wake and not wake[0].done():
                wake[0].set_result(None)

        def on_deadline() -> None:
            past_deadline.append(True)
            wake_up()

        def finish(step_id: str, result: StepResult) -> None:
            run.results[step_id] = result
            for child in children[step_id]:
                waiting[child] -= 1
                if waiting[child] == 0:
                    heapq.heappush(ready, index[child])

        def complete(flight: _Flight, result: StepResult) -> None:
            """Called on the loop when a started step ends: settle, free the slot, wake."""
            now = loop.time()
            started = flight.started if flight.started is not None else now
            # Plain attribute writes (no validation needed) straight into the model's fields.
            result.__dict__.update(
                step_id=flight.step.id,
                cost_usd=session.ledger.settle(
                    flight.step.id, flight.step.executor, flight.bound, result.cost_usd
                ),
                started_s=started - run.origin,
                finished_s=now - run.origin,
            )
            completed.append((flight, result))
            flight.slots.release()
            wake_up()

        deadline_timer = loop.call_at(deadline, on_deadline) if deadline is not None else None

        while ready or in_flight:
            while (
                ready
                and stop_reason is None
                and (self.max_parallel is None or len(in_flight) < self.max_parallel)
            ):
                step = steps[heapq.heappop(ready)]
                now = loop.time()
                blocked = self._blocked_reason(step, run)
                if blocked is not None:
                    finish(step.id, _skipped(step, blocked, now - run.origin))
                    continue
                if deadline is not None and now >= deadline:
                    stop_reason, stop_detail = "time_budget", "time budget reached"
                    finish(step.id, _skipped(step, stop_detail, now - run.origin))
                    break
                request = self._request(step, run)
                executor = session.executor(step.executor)
                bound = session.cost_upper_bound(request, executor)
                if not session.ledger.try_reserve(bound):
                    stop_reason = "cost_budget"
                    stop_detail = (
                        f"step {step.id!r} on {step.executor} could cost up to ${bound:.6f}, "
                        f"but only ${session.ledger.remaining_usd:.6f} of the "
                        f"${session.ledger.budget_usd:.6f} budget is left"
                    )
                    finish(step.id, _skipped(step, "cost budget: " + stop_detail, now - run.origin))
                    break
                flight = _Flight(step, request, executor, bound, session.slots(step.executor))
                in_flight[step.id] = flight
                self._launch(flight, complete, loop)
            if not in_flight:
                if stop_reason is not None:
                    break
                continue
            if not completed and not past_deadline:
                wake.append(loop.create_future())
                try:
                    await wake[0]
                finally:
                    wake.clear()
            if not completed:
                stop_reason, stop_detail = "time_budget", "time budget reached"
                await self._cancel_all(in_flight, run, loop)
                for step_id, result in self._cancelled_results(in_flight, run, loop):
                    finish(step_id, result)
                in_flight.clear()
                break
            for flight, result in completed:
                del in_flight[flight.step.id]
                finish(flight.step.id, result)
            completed.clear()

        if deadline_timer is not None:
            deadline_timer.cancel()
        now = loop.time() - run.origin
        reason = f"not started: {stop_reason}" if stop_reason else "not started"
        for step in steps:
            if step.id not in run.results:
                run.results[step.id] = _skipped(step, reason, now)
        return PlanOutcome([run.results[step.id] for step in steps], stop_reason, stop_detail)

    def _launch(
        self,
        flight: _Flight,
        complete: Callable[[_Flight, StepResult], None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        executor = flight.executor
        simulate = getattr(executor, "simulate", None) if self.sync_fast_path else None
        if simulate is not None:

            def start() -> None:
                flight.has_slot = True
                flight.started = loop.time()
                result = self._simulate(flight, simulate)
                duration = min(result.latency_s, self.step_timeout_s)
                flight.timer = loop.call_at(flight.started + duration, complete, flight, result)

            flight.start = start
            flight.slots.acquire(start)
            return

        async def run_async() -> StepResult:
            slot_ready = loop.create_future()

            def start() -> None:
                flight.has_slot = True
                slot_ready.set_result(None)

            flight.start = start
            if not flight.slots.acquire(start):
                await slot_ready
            flight.started = loop.time()
            try:
                async with asyncio.timeout(self.step_timeout_s):
                    return await executor.run(flight.request)
            except TimeoutError:
                return self._timed_out(flight)
            except Exception as exc:  # an executor bug must not take the episode down
                return _failed(
                    flight.step,
                    f"executor error: {type(exc).__name__}: {exc}",
                    flight.request.covers,
                )

        flight.task = loop.create_task(run_async())
        flight.task.add_done_callback(
            lambda task_: None if task_.cancelled() else complete(flight, task_.result())
        )

    def _simulate(
        self, flight: _Flight, simulate: Callable[[StepRequest], StepResult]
    ) -> StepResult:
        try:
            result = simulate(flight.request)
        except Exception as exc:
            return _failed(
                flight.step, f"executor error: {type(exc).__name__}: {exc}", flight.request.covers
            )
        if result.latency_s > self.step_timeout_s:
            return self._timed_out(flight)
        return result

    def _timed_out(self, flight: _Flight) -> StepResult:
        tokens_in = flight.executor.estimate_input_tokens(flight.request)
        return _failed(
            flight.step,
            f"timeout after {self.step_timeout_s:g}s",
            flight.request.covers,
            tokens_in=tokens_in,
            cost_usd=flight.executor.profile.cost_usd(tokens_in, 0),
            latency_s=self.step_timeout_s,
        )

    @staticmethod
    async def _cancel_all(
        in_flight: dict[str, _Flight], run: _Run, loop: asyncio.AbstractEventLoop
    ) -> None:
        tasks = []
        for flight in in_flight.values():
            if flight.timer is not None:
                flight.timer.cancel()
            if flight.task is not None:
                flight.task.cancel()
                tasks.append(flight.task)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    @staticmethod
    def _cancelled_results(
        in_flight: dict[str, _Flight], run: _Run, loop: asyncio.AbstractEventLoop
    ) -> list[tuple[str, StepResult]]:
        """Results of steps cut off at the deadline: a started step is charged its input tokens
        (the prompt was sent); a step still waiting for a slot costs nothing."""
        now = loop.time() - run.origin
        # Leave the queues first, so freed slots are not handed to steps being cancelled.
        for flight in in_flight.values():
            if not flight.has_slot and flight.start is not None:
                flight.slots.withdraw(flight.start)
        for flight in in_flight.values():
            if flight.has_slot:
                flight.slots.release()
        results = []
        ledger = run.session.ledger
        for step_id, flight in in_flight.items():
            if flight.started is None:
                charged = ledger.settle(step_id, flight.step.executor, flight.bound, 0.0)
                started = now
            else:
                input_cost = flight.executor.profile.cost_usd(
                    flight.executor.estimate_input_tokens(flight.request), 0
                )
                charged = ledger.settle(step_id, flight.step.executor, flight.bound, input_cost)
                started = flight.started - run.origin
            results.append(
                (
                    step_id,
                    _failed(
                        flight.step,
                        "cancelled: time budget reached "
                        + ("while running" if flight.started is not None else "before it started"),
                        flight.request.covers,
                        cost_usd=charged,
                        started_s=started,
                        finished_s=now,
                    ),
                )
            )
        return results

    @staticmethod
    def _blocked_reason(step: Step, run: _Run) -> str | None:
        for dep in step.depends_on:
            result = run.result_of(dep)
            if result.status != "ok":
                return f"dependency {dep} {result.status}: {result.error}"
        return None

    @staticmethod
    def _request(step: Step, run: _Run) -> StepRequest:
        inputs = tuple(run.result_of(dep) for dep in step.depends_on)
        instruction = step.instruction
        if "{" in instruction:
            instruction = substitute_placeholders(
                instruction, {result.step_id: result.output for result in inputs}
            )
        profile = run.session.executor(step.executor).profile
        return StepRequest(
            step_id=step.id,
            instruction=instruction,
            task=run.task,
            covers=tuple(step.covers or ()),
            inputs=inputs,
            max_output_tokens=profile.max_output_tokens,
            seed=run.seed,
        )
