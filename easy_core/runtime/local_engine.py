"""The local DAG engine: runs one plan's steps on asyncio, each the moment its own dependencies
finish (LLMCompiler's task fetching unit; no level barriers).

Per step: placeholders `{id}` are filled from dependency outputs, the worst-case cost is
reserved in the ledger before the step is launched (a step that would pass the budget never
starts), it waits FIFO for a slot of its executor, runs bounded by a timeout, then settles its
real cost and frees the slot. A step whose dependency failed or was skipped is skipped with the
reason. The time budget is a deadline on the loop's clock: past it, steps in flight are cancelled
(a started step is charged its input) and nothing new starts.

Scheduling is event-driven: a finishing step's callback records it and launches whatever became
ready, so the engine's coroutine only wakes at the end (or at the deadline). Two ways to run a
step share that scheduler:
- an executor's async `run()` in its own task (every backend);
- for deterministic executors that can `simulate()` a step synchronously (the sim backend), a
  single timer on the loop's clock at the modelled finish time: no task, no coroutine. This is
  what makes the virtual-time simulator fast; `sync_fast_path=False` forces the general path,
  and the tests check that both give identical results.

One concept in one module: the per-call state machine of one engine (slot wait, run,
timeout, retry, fallback, cancellation at the deadline); its decisions come from
`resilience`, its scheduling from `scheduler`.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from easy_core.core.clock import Cancellable, Clock
from easy_core.core.params import ResilienceParams
from easy_core.core.schemas import Plan, Step, StepRequest, StepResult, Task
from easy_core.executors.base import Executor
from easy_core.executors.openai_http import shared_prefix
from easy_core.executors.pool import PoolSession, Slots, SlotTicket
from easy_core.runtime.release import typical_latency_s
from easy_core.runtime.resilience import (
    answers_subtasks,
    call_timeout,
    executor_error_result,
    failed_result,
    fallback_executor,
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


@dataclass(eq=False, slots=True)
class _Flight:
    """A launched step: waiting for a slot, or running."""

    step: Step
    request: StepRequest
    executor: Executor
    executor_name: str
    bound: float
    slots: Slots
    has_slot: bool = False
    started: float | None = None
    first_started: float | None = None
    attempt: int = 0
    tried: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    simulated: bool = False  # the executor answers subtasks (sim): a missing answer is a fault
    deterministic: bool = False  # its failures repeat (a program's error): never retried
    expected_s: float = 0.0  # latency the profile predicts for this call
    spent: float = 0.0
    in_backoff: bool = False
    start: Callable[[], None] | None = None
    timer: Cancellable | None = None
    task: asyncio.Task[StepResult] | None = None
    ticket: SlotTicket | None = None  # for slots shared with other episodes


class LocalEngine:
    """`max_parallel=1` runs the same plans one step at a time (the `--sequential` switch)."""

    def __init__(
        self,
        step_timeout_s: float = 300.0,
        max_parallel: int | None = None,
        sync_fast_path: bool = True,
        resilience: ResilienceParams | None = None,
        difficulty_slope: float = 0.6,
        step_timeout_factor: float = 0.0,
    ):
        if max_parallel is not None and max_parallel < 1:
            raise ValueError("max_parallel must be at least 1 or None")
        self.step_timeout_s = step_timeout_s
        self.max_parallel = max_parallel
        self.sync_fast_path = sync_fast_path
        self.resilience = resilience or ResilienceParams()
        self.difficulty_slope = difficulty_slope  # to rank fallback executors by capability
        self.step_timeout_factor = step_timeout_factor
        # What running a call elsewhere may add to its latency (the Prefect engine: a task
        # run on a worker, which bounds the call by its timeout there), allowed on top of the
        # profile-based timeout; nothing in process.
        self.call_overhead_s = 0.0

    async def call(
        self, executor: Executor, step: Step, request: StepRequest, timeout_s: float
    ) -> StepResult:
        """One call of an executor, which the engine bounds by `timeout_s`: here, on this
        event loop. An engine that runs calls
        elsewhere (the Prefect engine: as task runs on its task runner) overrides this and
        keeps every other rule of a step's life (timeouts, retries, fallback, breakers, the
        ledger, the deadline)."""
        return await executor.run(request)

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
        """Run a validated plan. `origin` is the clock time the episode started (result times
        are relative to it); `deadline` is the clock time at which the time budget runs out.
        `clock` defaults to the running asyncio loop; a `DiscreteEventClock` runs the plan as a
        discrete-event simulation (every executor must be able to `simulate()`)."""
        if clock is None:
            clock = asyncio.get_running_loop()
        schedule = _Schedule(self, plan, session, task, seed, prior or {}, clock, origin, deadline)
        return await schedule.run()


class _Schedule(PlanSchedule):
    """One plan's run by the local engine: steps in flight, retries, fallbacks, breakers."""

    def __init__(
        self,
        engine: LocalEngine,
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
        self.in_flight: dict[str, _Flight] = {}
        self._downstream: dict[str, float] | None = None
        self._arrived: list[tuple[int, float, _Flight, StepResult]] = []

    # ---------------------------------------------------------------- scheduling

    def _pump(self) -> None:
        """Launch ready steps while allowed; resolve `done` once nothing can happen any more."""
        limit = self.engine.max_parallel
        while self.ready and self.stop_reason is None:
            if limit is not None and len(self.in_flight) >= limit:
                break
            self._launch_or_skip(self.steps[heapq.heappop(self.ready)])
        if not self.in_flight and (not self.ready or self.stop_reason is not None):
            self._resolve()

    def _launch_or_skip(self, step: Step) -> None:
        now = self.clock.time()
        if self._skipped(step, now):
            return
        name = step.executor
        breaker = self.session.existing_breaker(name)
        if breaker is not None and not breaker.allows(now):
            name = self._fallback(step, [name], name) or name
        request = self._request(step, name)
        session = self.session
        executor = session.executor(name)
        bound, expected = estimate_call(request, executor)
        if not self._reserve(step, name, bound):
            self._finish(
                step.id, skipped_result(step, "cost budget: " + self.stop_detail, now - self.origin)
            )
            return
        flight = _Flight(
            step,
            request,
            executor,
            name,
            bound,
            session.slots(name),
            tried=[name],
            simulated=answers_subtasks(executor),
            deterministic=getattr(executor, "deterministic", False),
            expected_s=expected,
        )
        self.in_flight[step.id] = flight
        flight.ticket = self._ticket(flight)
        self._start(flight)

    def _reserve(self, step: Step, name: str, bound: float) -> bool:
        """Reserve a call's worst-case cost; when it does not fit, stop with the reason."""
        ledger = self.session.ledger
        if ledger.try_reserve(bound):
            return True
        self._stop(
            "cost_budget",
            f"step {step.id!r} on {name} could cost up to ${bound:.6f}, but only "
            f"${ledger.remaining_usd:.6f} of the ${ledger.budget_usd:.6f} budget is left",
        )
        return False

    def _start(self, flight: _Flight) -> None:
        executor = flight.executor
        simulate = getattr(executor, "simulate", None)
        if simulate is not None and (self.engine.sync_fast_path or self.discrete):
            self._start_simulated(flight, simulate)
        elif self.discrete:
            raise TypeError(
                f"executor {flight.executor_name!r} cannot simulate(); the discrete-event clock "
                "runs only simulating executors: use an asyncio loop"
            )
        else:
            self._start_task(flight)

    def _arrive(self, flight: _Flight, result: StepResult) -> None:
        """A call ended (on the loop). Calls that end at the same instant are settled together,
        in plan order, once the loop has reported them all: which of them frees its slot first,
        and so which waiting step starts, must not depend on the order the loop runs their
        callbacks in (asyncio's timer heap does not keep ties in order). Elsewhere a call
        waits only until the callbacks already due have run."""
        now = self.clock.time()
        if not self._arrived:
            self.clock.call_at(now, self._settle_arrived)
        self._arrived.append((self.index[flight.step.id], now, flight, result))

    def _settle_arrived(self) -> None:
        arrived, self._arrived = self._arrived, []
        arrived.sort(key=lambda entry: entry[0])
        for _, now, flight, result in arrived:
            if self.in_flight.get(flight.step.id) is flight:  # not cut off at the deadline
                self._complete(flight, result, now)

    def _complete(self, flight: _Flight, result: StepResult, now: float) -> None:
        """Settle a call that ended at `now` and free its slot; then retry or fall back if
        it failed and attempts are left, else record the step and schedule what is ready."""
        step = flight.step
        if flight.first_started is None:
            flight.first_started = flight.started if flight.started is not None else now
        flight.spent += self.session.ledger.settle(
            step.id, flight.executor_name, flight.bound, result.cost_usd
        )
        # Drop the flight's references to its callbacks: they point back at the flight, and
        # without these cycles a run's garbage is freed at once, with no collector pass.
        flight.start = flight.timer = flight.task = None
        flight.has_slot = False
        flight.slots.release(flight.ticket)
        usable = result.status == "ok" and (  # the common case, decided without fault_of
            len(result.sub_answers) == len(result.covers)
            if flight.simulated
            else bool(result.output.strip())
        )
        fault = None if usable else fault_of(result, answers_subtasks=flight.simulated)
        if fault is None:
            breaker = self.session.existing_breaker(flight.executor_name)
            if breaker is not None:
                breaker.success()
        else:
            flight.faults.append(fault)
            # A deterministic executor's failure is the step's result (a program that raised
            # raises again; another executor handed the program would not run it), not a fault
            # of the executor: no retry, no fallback, no breaker count.
            if not flight.deterministic:
                self._breaker(flight.executor_name).failure(now)
                if not self.finished and self._retry_later(flight, now):
                    return
        # Plain attribute writes (no validation needed) straight into the model's fields.
        result.__dict__.update(
            step_id=step.id,
            executor=flight.executor_name,
            cost_usd=flight.spent,
            started_s=flight.first_started - self.origin,
            finished_s=now - self.origin,
            attempts=flight.attempt + 1,
            faults=flight.faults,  # the flight ends here: its list can be handed over
        )
        del self.in_flight[step.id]
        self._finish(step.id, result)
        if not self.finished:
            self._pump()

    # ---------------------------------------------------------------- retries and fallback

    def _breaker(self, name: str):  # noqa: ANN202 - CircuitBreaker
        r = self.engine.resilience
        return self.session.breaker(name, r.breaker_failures, r.breaker_cooldown_s)

    def _retry_later(self, flight: _Flight, now: float) -> bool:
        """Schedule the next attempt (same executor, or a fallback) after a backoff; False when
        no attempt is left or it would start past the deadline."""
        r = self.engine.resilience
        if flight.attempt + 1 >= r.max_attempts or self.stop_reason is not None:
            return False
        current = flight.executor_name
        name: str | None = current
        if flight.tried.count(current) >= r.attempts_per_executor or not self._breaker(
            current
        ).allows(now):
            fallback = self._fallback(flight.step, flight.tried, current) if r.fallback else None
            # Without a capable fallback, keep trying the same executor while its breaker lets
            # us; once it is open, the most capable other executor is better than giving up.
            if fallback is None and self._breaker(current).allows(now):
                fallback = current
            elif fallback is None and r.fallback:
                fallback = self._fallback(flight.step, flight.tried, current, best_effort=True)
            name = fallback
            if name is None:
                return False
        delay = r.backoff_s * r.backoff_factor ** flight.tried.count(name)
        if self.deadline is not None and now + delay >= self.deadline:
            return False
        flight.in_backoff = True
        flight.timer = self.clock.call_at(now + delay, self._retry, flight, name)
        return True

    def _retry(self, flight: _Flight, name: str) -> None:
        flight.in_backoff = False
        flight.timer = None
        step = flight.step
        flight.attempt += 1
        flight.tried.append(name)
        executor = self.session.executor(name)
        request = replace(
            flight.request,
            attempt=flight.attempt,
            max_output_tokens=executor.profile.max_output_tokens,
        )
        bound, expected = estimate_call(request, executor)
        if not self._reserve(step, name, bound):
            del self.in_flight[step.id]
            now = self.clock.time() - self.origin
            result = failed_result(
                step,
                f"gave up after {flight.attempt} attempts ({', '.join(flight.faults)}): "
                "the next attempt does not fit the cost budget",
                request.covers,
                cost_usd=flight.spent,
                started_s=(flight.first_started or 0.0) - self.origin,
                finished_s=now,
            )
            result.executor = flight.executor_name
            result.attempts, result.faults = flight.attempt, list(flight.faults)
            self._finish(step.id, result)
            self._pump()
            return
        flight.request, flight.executor, flight.executor_name = request, executor, name
        flight.bound, flight.slots, flight.started = bound, self.session.slots(name), None
        flight.simulated, flight.expected_s = answers_subtasks(executor), expected
        flight.ticket = self._ticket(flight)
        self._start(flight)

    def _downstream_seconds(self) -> dict[str, float]:
        """For each step, the predicted time of the longest chain of steps that wait on it (by
        the latency model of each one's executor at its typical size): how much of its episode
        is still to come behind it, which the tail-risk release rule weighs."""
        session, children = self.session, self.children
        own = {s.id: typical_latency_s(session.executor(s.executor).profile) for s in self.steps}
        down: dict[str, float] = {}

        def chain(step_id: str) -> float:  # the plan is a validated DAG: this terminates
            if step_id not in down:
                down[step_id] = max((own[c] + chain(c) for c in children[step_id]), default=0.0)
            return down[step_id]

        return {step.id: chain(step.id) for step in self.steps}

    def _ticket(self, flight: _Flight) -> SlotTicket | None:
        """What a shared dispatcher needs to choose among waiting steps; None for the
        episode's own FIFO slots."""
        session = self.session
        if session.shared is None:
            return None
        if self._downstream is None:
            self._downstream = self._downstream_seconds()
        return SlotTicket(
            episode=session.episode,
            arrival_s=self.origin if session.arrival_s is None else session.arrival_s,
            prefix=shared_prefix(flight.request),
            text=flight.request.instruction,
            expected_s=flight.expected_s,
            downstream_s=self._downstream[flight.step.id],
        )

    def _fallback(
        self, step: Step, tried: list[str], current: str, best_effort: bool = False
    ) -> str | None:
        now = self.clock.time()
        return fallback_executor(
            step,
            self.task,
            self.session.pool.executors,
            tried,
            current,
            lambda name: self._breaker(name).allows(now),
            self.engine.difficulty_slope,
            best_effort,
        )

    # ---------------------------------------------------------------- running a step

    def _start_simulated(
        self, flight: _Flight, simulate: Callable[[StepRequest], StepResult]
    ) -> None:
        clock = self.clock

        def start() -> None:
            flight.has_slot = True
            flight.started = clock.time()
            timeout = self._timeout(flight)
            try:
                result = simulate(flight.request)
            except Exception as exc:
                result = self._executor_error(flight, exc)
            if result.latency_s > timeout:
                result = self._timed_out(flight, timeout)
            flight.timer = clock.call_at(
                flight.started + min(result.latency_s, timeout), self._arrive, flight, result
            )

        flight.start = start
        flight.slots.acquire(start, flight.ticket)

    def _start_task(self, flight: _Flight) -> None:
        loop = asyncio.get_running_loop()

        async def run_async() -> StepResult:
            slot_ready = loop.create_future()

            def start() -> None:
                flight.has_slot = True
                slot_ready.set_result(None)

            flight.start = start
            if not flight.slots.acquire(start, flight.ticket):
                await slot_ready
            flight.started = loop.time()
            timeout = self._timeout(flight)
            try:
                # The call is bounded by `timeout` where it runs; here it may also take the
                # trip there and back.
                async with asyncio.timeout(timeout + self.engine.call_overhead_s):
                    return await self.engine.call(
                        flight.executor, flight.step, flight.request, timeout
                    )
            except TimeoutError:
                return self._timed_out(flight, timeout)
            except Exception as exc:  # an executor bug must not take the episode down
                return self._executor_error(flight, exc)

        flight.task = loop.create_task(run_async())
        flight.task.add_done_callback(
            lambda task_: None if task_.cancelled() else self._arrive(flight, task_.result())
        )

    def _executor_error(self, flight: _Flight, exc: Exception) -> StepResult:
        return executor_error_result(flight.step, flight.request, exc)

    def _timed_out(self, flight: _Flight, timeout: float) -> StepResult:
        return timed_out_result(flight.step, flight.request, flight.executor, timeout)

    def _timeout(self, flight: _Flight) -> float:
        engine = self.engine
        return call_timeout(flight.expected_s, engine.step_timeout_s, engine.step_timeout_factor)

    async def _cancel_in_flight(self) -> None:
        """Cut off the steps in flight at the deadline: a started step is charged its input
        tokens (the prompt was sent); a step still waiting for a slot costs nothing."""
        tasks = []
        for flight in self.in_flight.values():
            if flight.timer is not None:
                flight.timer.cancel()
            if flight.task is not None:
                flight.task.cancel()
                tasks.append(flight.task)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._settle_arrived()  # calls that ended before the deadline keep their results
        flights = list(self.in_flight.values())  # a task may have finished in the meantime
        # Leave the queues first, so freed slots are not handed to steps being cancelled.
        for flight in flights:
            if not flight.has_slot and flight.start is not None:
                flight.slots.withdraw(flight.start)
        for flight in flights:
            if flight.has_slot:
                flight.slots.release(flight.ticket)
        now = self.clock.time() - self.origin
        ledger = self.session.ledger
        for flight in flights:
            step, name = flight.step, flight.executor_name
            if flight.in_backoff:  # between attempts: nothing reserved, nothing running
                charged, when = 0.0, "while waiting to retry"
            elif flight.started is None:
                charged = ledger.settle(step.id, name, flight.bound, 0.0)
                when = "before it started"
            else:
                input_cost = flight.executor.profile.cost_usd(
                    flight.executor.estimate_input_tokens(flight.request), 0
                )
                charged = ledger.settle(step.id, name, flight.bound, input_cost)
                when = "while running"
            first = flight.first_started if flight.first_started is not None else flight.started
            flight.start = flight.timer = flight.task = None
            result = failed_result(
                step,
                f"cancelled: time budget reached {when}",
                flight.request.covers,
                cost_usd=flight.spent + charged,
                started_s=now if first is None else first - self.origin,
                finished_s=now,
            )
            result.executor, result.attempts, result.faults = (
                name,
                flight.attempt + 1,
                flight.faults,
            )
            self._finish(step.id, result)
        self.in_flight.clear()

    # ---------------------------------------------------------------- inputs

    def _request(self, step: Step, executor_name: str) -> StepRequest:
        inputs = tuple(self._result_of(dep) for dep in step.depends_on)
        profile = self.session.executor(executor_name).profile
        return build_request(step, inputs, self.task, self.seed, profile.max_output_tokens)
