"""The `speculative` dispatcher: online dispatch of ready steps to a fixed number of workers,
with speculative re-execution of straggling steps (the "backup task" of MapReduce).

`SpeculativeEngine` is a `PlanEngine`: `EpisodeRunner(..., engine=SpeculativeEngine(8))` runs
any policy with it, on a `DiscreteEventClock` (executors that `simulate()`) or an asyncio loop.

- Workers: at most `worker_limit` executor calls are in flight at once, across executors,
  speculative copies included; each executor's own `max_concurrency` still holds (the session's
  FIFO slots). A step holds its worker from dispatch (it may still wait for its executor's slot)
  to its end, as under `LocalEngine(max_parallel=W)`, so the two are directly comparable.
- Dispatch: ready steps go to free workers in plan order the moment their dependencies finish.
  Fresh work comes first: a straggler's copy only takes a worker that no ready step wants.
- Stragglers: a call still running `straggler_factor` x the latency its profile predicts
  (`estimate_call`) after it started gets ONE speculative copy, once a worker and a slot of its
  executor are free and the copy's worst-case cost fits the budget (reserved in the ledger
  first; when it does not fit, the step is not speculated). The copy runs on the same executor
  with `attempt + 1`: injected faults (a `slow` draw included) are drawn afresh per attempt,
  while the simulated answer is the same, so speculation changes when a step ends and what it
  costs, never its quality. A copy on another executor would trade quality for speed, which is
  the policy's decision, not the dispatcher's.
- Racing: the first call to end with a usable result wins; the other is cancelled. A call that
  ends unusable (failed, empty, malformed) while its twin runs does not end the step, so a
  failed primary whose copy succeeds counts as a success. There are no other retries and no
  fallback: a step whose only call fails has failed.
- Cancelled calls are charged: their input tokens (the prompt was sent) plus their output
  tokens pro rata of the time they ran over the time the whole call would have taken (the
  modelled latency on the simulated path, where it is known; else the profile's prediction,
  capped at the full output, so a cancelled straggler is charged all of it there). The same
  rule applies to calls cut off by the deadline (`LocalEngine` charges those their input only).
  A step's `cost_usd` is the sum over its calls, so the ledger's spend equals the sum of step
  costs. Circuit breakers are neither consulted nor fed.
- As in `LocalEngine`: a step whose dependency did not end ok is skipped with the reason, result
  times are relative to `origin`, a call is bounded by the step timeout, and at the `deadline`
  nothing new starts and the calls in flight are cancelled.

A speculated step's result reports `attempts=2`, a `"straggler"` fault, and as `latency_s` the
time from its first call's start to the winner's end (what its dependents waited), which is
also what counts towards `critical_path_s`.

One concept in one module: the speculative engine's per-call state machine (copies, races,
cancellation); its benchmark is in `benchmarks.speculative_bench`.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from easy_core.core.clock import Cancellable, Clock
from easy_core.core.schemas import Plan, Step, StepRequest, StepResult, Task
from easy_core.executors.base import Executor
from easy_core.executors.pool import ExecutorSlots, PoolSession
from easy_core.runtime.resilience import (
    answers_subtasks,
    call_timeout,
    executor_error_result,
    fault_of,
    timed_out_result,
)
from easy_core.runtime.scheduler import (
    PlanOutcome,
    PlanSchedule,
    build_request,
    estimate_call,
    skipped_result,
)

STRAGGLER = "straggler"  # the fault a speculated step records


@dataclass
class SpeculationStats:
    """What speculation did, summed over every plan an engine ran."""

    steps: int = 0  # steps dispatched
    copies: int = 0  # speculative copies launched
    wins: int = 0  # copies that ended first with a usable result
    cancelled: int = 0  # calls cancelled because their twin won
    cancelled_cost_usd: float = 0.0  # what those cancelled calls were charged
    refused_budget: int = 0  # stragglers not copied because the copy did not fit the budget
    max_in_flight: int = 0  # most calls in flight at once (never above the worker limit)


@dataclass(eq=False, slots=True)
class _Call:
    """One executor call of a step: its primary, or its speculative copy."""

    run: _Run
    request: StepRequest
    executor: Executor
    name: str
    bound: float  # worst-case cost, reserved in the ledger
    expected_s: float  # latency the profile predicts
    slots: ExecutorSlots
    copy: bool
    simulated: bool
    started: float | None = None
    has_slot: bool = False
    modelled: StepResult | None = None  # simulated path: the result, known at the start
    start: Callable[[], None] | None = None
    timer: Cancellable | None = None
    task: asyncio.Task[StepResult] | None = None


@dataclass(eq=False, slots=True)
class _Run:
    """A dispatched step: its calls in flight and what its ended calls cost."""

    step: Step
    calls: list[_Call] = field(default_factory=list)
    spent: float = 0.0
    faults: list[str] = field(default_factory=list)
    first_started: float | None = None
    check: Cancellable | None = None  # the straggler check of its primary
    speculated: bool = False


class SpeculativeEngine:
    """Dispatch to `worker_limit` workers with speculative copies of stragglers (see the
    module docstring). `stats` accumulate over every plan this engine runs."""

    def __init__(
        self,
        worker_limit: int = 8,
        *,
        straggler_factor: float = 1.5,
        step_timeout_s: float = 300.0,
        step_timeout_factor: float = 0.0,
        sync_fast_path: bool = True,
    ):
        if worker_limit < 1:
            raise ValueError("worker_limit must be at least 1")
        if straggler_factor <= 0:
            raise ValueError("straggler_factor must be positive")
        self.worker_limit = worker_limit
        self.straggler_factor = straggler_factor
        self.step_timeout_s = step_timeout_s
        self.step_timeout_factor = step_timeout_factor
        self.sync_fast_path = sync_fast_path
        self.stats = SpeculationStats()

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
        """Run a validated plan; arguments as for `LocalEngine.execute`."""
        if clock is None:
            clock = asyncio.get_running_loop()
        if session.shared is not None:  # it reads free slots and queues of FIFO slots
            raise TypeError("the speculative engine runs on an episode's own slots, not shared")
        schedule = _Schedule(self, plan, session, task, seed, prior or {}, clock, origin, deadline)
        return await schedule.run()


class _Schedule(PlanSchedule):
    """One plan's execution: ready heap, calls in flight, stragglers waiting for a worker."""

    def __init__(
        self,
        engine: SpeculativeEngine,
        plan: Plan,
        session: PoolSession,
        task: Task,
        seed: int,
        prior: Mapping[str, StepResult],
        clock: Clock,
        origin: float | None,
        deadline: float | None,
    ):
        super().__init__(plan, session, task, seed, prior, clock, origin, deadline)
        self.engine = engine
        self.stats = engine.stats
        self.in_flight: dict[str, _Run] = {}
        self.stragglers: list[_Run] = []  # past their threshold, waiting for a worker or slot
        self.busy = 0  # calls in flight: the workers taken

    # ---------------------------------------------------------------- dispatch

    def _pump(self) -> None:
        """Give free workers to ready steps, then to stragglers' copies; resolve `done` once
        nothing can happen any more."""
        if self.finished:  # the deadline woke `run`, which cancels what is in flight
            return
        limit = self.engine.worker_limit
        while self.ready and self.stop_reason is None and self.busy < limit:
            self._dispatch(self.steps[heapq.heappop(self.ready)])
        if self.stragglers and self.stop_reason is None and self.busy < limit:
            self.stragglers = [run for run in self.stragglers if not self._speculate(run)]
        if not self.in_flight and (not self.ready or self.stop_reason is not None):
            self._resolve()

    def _dispatch(self, step: Step) -> None:
        now = self.clock.time()
        if self._skipped(step, now):
            return
        executor = self.session.executor(step.executor)
        inputs = tuple(self._result_of(dep) for dep in step.depends_on)
        request = build_request(
            step, inputs, self.task, self.seed, executor.profile.max_output_tokens
        )
        bound, expected = estimate_call(request, executor)
        ledger = self.session.ledger
        if not ledger.try_reserve(bound):
            self._stop(
                "cost_budget",
                f"step {step.id!r} on {step.executor} could cost up to ${bound:.6f}, but only "
                f"${ledger.remaining_usd:.6f} of the ${ledger.budget_usd:.6f} budget is left",
            )
            reason = "cost budget: " + self.stop_detail
            self._finish(step.id, skipped_result(step, reason, now - self.origin))
            return
        run = _Run(step)
        self.in_flight[step.id] = run
        self.stats.steps += 1
        self._launch(run, request, executor, step.executor, bound, expected, copy=False)

    def _straggling(self, run: _Run) -> None:
        """The primary passed its straggler threshold: queue it for a copy."""
        run.check = None
        self.stragglers.append(run)
        self._pump()

    def _speculate(self, run: _Run) -> bool:
        """Launch the straggler's copy if a worker and a slot of its executor are free; True
        when the straggler is dealt with (copied, refused, or already over)."""
        if run.step.id not in self.in_flight or run.speculated or not run.calls:
            return True
        if self.busy >= self.engine.worker_limit:
            return False
        primary = run.calls[0]
        if primary.slots.free <= 0 or primary.slots.queue:  # a copy never queues
            return False
        request = replace(primary.request, attempt=primary.request.attempt + 1)
        bound, expected = estimate_call(request, primary.executor)
        if not self.session.ledger.try_reserve(bound):
            self.stats.refused_budget += 1
            return True
        run.speculated = True
        run.faults.append(STRAGGLER)
        self.stats.copies += 1
        self._launch(run, request, primary.executor, primary.name, bound, expected, copy=True)
        return True

    def _launch(
        self,
        run: _Run,
        request: StepRequest,
        executor: Executor,
        name: str,
        bound: float,
        expected: float,
        *,
        copy: bool,
    ) -> None:
        call = _Call(
            run,
            request,
            executor,
            name,
            bound,
            expected,
            self.session.slots(name),
            copy,
            simulated=answers_subtasks(executor),
        )
        run.calls.append(call)
        self.busy += 1
        if self.busy > self.stats.max_in_flight:
            self.stats.max_in_flight = self.busy
        simulate = getattr(executor, "simulate", None)
        if simulate is not None and (self.engine.sync_fast_path or self.discrete):
            self._start_simulated(call, simulate)
        elif self.discrete:
            raise TypeError(
                f"executor {name!r} cannot simulate(); the discrete-event clock runs only "
                "simulating executors: use an asyncio loop"
            )
        else:
            self._start_task(call)

    def _started(self, call: _Call) -> None:
        """The call got its slot: note the time and arm the primary's straggler check."""
        call.has_slot = True
        call.started = now = self.clock.time()
        run = call.run
        if run.first_started is None:
            run.first_started = now
        if not call.copy:
            threshold = self.engine.straggler_factor * call.expected_s
            run.check = self.clock.call_at(now + threshold, self._straggling, run)

    # ---------------------------------------------------------------- running a call

    def _timeout(self, call: _Call) -> float:
        engine = self.engine
        return call_timeout(call.expected_s, engine.step_timeout_s, engine.step_timeout_factor)

    def _start_simulated(self, call: _Call, simulate: Callable[[StepRequest], StepResult]) -> None:
        def start() -> None:
            self._started(call)
            timeout = self._timeout(call)
            try:
                result = simulate(call.request)
            except Exception as exc:
                result = executor_error_result(call.run.step, call.request, exc)
            if result.latency_s > timeout:
                result = timed_out_result(call.run.step, call.request, call.executor, timeout)
            call.modelled = result
            finish = call.started + min(result.latency_s, timeout)  # type: ignore[operator]
            call.timer = self.clock.call_at(finish, self._complete, call, result)

        call.start = start
        call.slots.acquire(start)

    def _start_task(self, call: _Call) -> None:
        loop = asyncio.get_running_loop()

        async def run_async() -> StepResult:
            slot_ready = loop.create_future()

            def start() -> None:
                self._started(call)
                slot_ready.set_result(None)

            call.start = start
            if not call.slots.acquire(start):
                await slot_ready
            timeout = self._timeout(call)
            try:
                async with asyncio.timeout(timeout):
                    return await call.executor.run(call.request)
            except TimeoutError:
                return timed_out_result(call.run.step, call.request, call.executor, timeout)
            except Exception as exc:  # an executor bug must not take the episode down
                return executor_error_result(call.run.step, call.request, exc)

        call.task = loop.create_task(run_async())
        call.task.add_done_callback(
            lambda task_: None if task_.cancelled() else self._complete(call, task_.result())
        )

    # ---------------------------------------------------------------- ending calls and steps

    def _complete(self, call: _Call, result: StepResult) -> None:
        """A call ended: settle it; a usable result (or the step's last call) ends the step,
        cancelling its twin; an unusable one leaves the twin running."""
        run = call.run
        if call not in run.calls:  # cancelled after its task had already ended
            return
        now = self.clock.time()
        step = run.step
        self._release(call)
        run.spent += self.session.ledger.settle(step.id, call.name, call.bound, result.cost_usd)
        fault = fault_of(result, answers_subtasks=call.simulated)
        if fault is not None:
            run.faults.append(fault)
            if run.calls:  # the twin may still succeed
                self._pump()
                return
        elif call.copy:
            self.stats.wins += 1
        for loser in list(run.calls):
            charged = self._cancel(loser, now)
            run.spent += charged
            self.stats.cancelled += 1
            self.stats.cancelled_cost_usd += charged
        if run.check is not None:
            run.check.cancel()
            run.check = None
        first = run.first_started if run.first_started is not None else now
        updates: dict[str, Any] = {
            "step_id": step.id,
            "executor": call.name,
            "cost_usd": run.spent,
            "started_s": first - self.origin,
            "finished_s": now - self.origin,
            "attempts": 2 if run.speculated else 1,
            "faults": run.faults,
        }
        if run.speculated:
            updates["latency_s"] = now - first
        # Plain attribute writes (no validation needed), as in LocalEngine.
        result.__dict__.update(updates)
        del self.in_flight[step.id]
        self._finish(step.id, result)
        if not self.finished:
            self._pump()

    def _release(self, call: _Call) -> None:
        """Take the call out of its step, free its worker and its slot (or its queue place)."""
        call.run.calls.remove(call)
        self.busy -= 1
        if call.timer is not None:
            call.timer.cancel()
        if call.has_slot:
            call.has_slot = False
            call.slots.release()
        elif call.start is not None:
            call.slots.withdraw(call.start)
        # Drop the call's references to its callbacks: they point back at it, and without
        # these cycles a run's garbage is freed at once (as in LocalEngine).
        call.start = call.timer = call.task = None

    def _cancel(self, call: _Call, now: float) -> float:
        """Cut a call off: free it and charge what it used so far (module docstring)."""
        if call.task is not None:
            call.task.cancel()
        self._release(call)
        charge = self._cancel_charge(call, now)
        return self.session.ledger.settle(call.run.step.id, call.name, call.bound, charge)

    @staticmethod
    def _cancel_charge(call: _Call, now: float) -> float:
        if call.started is None:  # still waiting for a slot: nothing was sent
            return 0.0
        modelled, executor = call.modelled, call.executor
        if modelled is not None:
            tokens_in, tokens_out, total = (
                modelled.tokens_in,
                modelled.tokens_out,
                modelled.latency_s,
            )
        else:
            tokens_in = executor.estimate_input_tokens(call.request)
            tokens_out = executor.output_token_cap(call.request)
            total = call.expected_s
        share = min(1.0, (now - call.started) / total) if total > 0 else 1.0
        profile = executor.profile
        return profile.cost_usd(tokens_in, 0) + share * profile.cost_usd(0, tokens_out)

    async def _cancel_in_flight(self) -> None:
        """Cancel every call in flight; a step ends failed, charged for what its calls used."""
        tasks = [c.task for run in self.in_flight.values() for c in run.calls if c.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        now = self.clock.time()
        runs = list(self.in_flight.values())
        # Leave the slot queues first, so freed slots are not handed to calls being cancelled.
        for run in runs:
            for call in [c for c in run.calls if not c.has_slot]:
                run.spent += self._cancel(call, now)
        for run in runs:
            for call in list(run.calls):
                run.spent += self._cancel(call, now)
            if run.check is not None:
                run.check.cancel()
            step = run.step
            first = run.first_started if run.first_started is not None else now
            result = StepResult(
                step_id=step.id,
                executor=step.executor,
                status="failed",
                error="cancelled: time budget reached",
                covers=list(step.covers or ()),
                cost_usd=run.spent,
                started_s=first - self.origin,
                finished_s=now - self.origin,
                attempts=2 if run.speculated else 1,
                faults=run.faults,
            )
            self._finish(step.id, result)
        self.in_flight.clear()
        self.stragglers.clear()
