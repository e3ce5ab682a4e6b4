"""The task-fetching scheduler every engine shares (LLMCompiler's task fetching unit): dependency
counts and a ready heap per plan, a step ready the moment its own dependencies finish (no level
barriers), results, the latency chain behind `critical_path_s`, and the stop reason.

An engine (`local_engine.LocalEngine`, `speculative.SpeculativeEngine`, the Prefect engine in
flows/) subclasses `PlanSchedule` with how it launches and cancels calls; the helpers here
(`build_request`, `estimate_call`, `blocked_reason`, `skipped_result`) are the parts of a step's
life that do not depend on where it runs.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from easy_core.core.clock import Clock, DiscreteEventClock
from easy_core.core.schemas import Plan, Step, StepRequest, StepResult, Task
from easy_core.executors.base import Executor
from easy_core.executors.pool import PoolSession
from easy_core.plans.validation import substitute_placeholders

StopReason = Literal["cost_budget", "time_budget"]


@dataclass
class PlanOutcome:
    results: list[StepResult]
    stop_reason: StopReason | None = None
    stop_detail: str = ""
    critical_path_s: float = 0.0  # longest dependency chain, by the steps' own latencies


class PlanEngine(Protocol):
    """Runs one validated plan; `LocalEngine` here, a Prefect engine in flows/."""

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
    ) -> PlanOutcome: ...


def blocked_reason(step: Step, result_of: Callable[[str], StepResult]) -> str | None:
    """Why a step cannot run: a dependency that did not end ok."""
    for dep in step.depends_on:
        result = result_of(dep)
        if result.status != "ok":
            return f"dependency {dep} {result.status}: {result.error}"
    return None


def build_request(
    step: Step, inputs: tuple[StepResult, ...], task: Task, seed: int, max_output_tokens: int
) -> StepRequest:
    """The step's request: placeholders filled from its dependencies' outputs."""
    instruction = step.instruction
    if "{" in instruction:
        instruction = substitute_placeholders(
            instruction, {result.step_id: result.output for result in inputs}
        )
    return StepRequest(
        step_id=step.id,
        instruction=instruction,
        task=task,
        covers=tuple(step.covers or ()),
        inputs=inputs,
        max_output_tokens=max_output_tokens,
        seed=seed,
    )


def estimate_call(request: StepRequest, executor: Executor) -> tuple[float, float]:
    """A call's worst-case cost (what the ledger reserves) and predicted latency, from one
    estimate of its input tokens and output cap."""
    tokens_in = executor.estimate_input_tokens(request)
    tokens_out = executor.output_token_cap(request)
    profile = executor.profile
    latency = profile.latency
    expected = (
        latency.ttft_s
        + tokens_in / latency.prefill_tokens_per_s
        + tokens_out / latency.tokens_per_s
    )
    return profile.cost_usd(tokens_in, tokens_out), expected


def skipped_result(step: Step, reason: str, now: float) -> StepResult:
    return StepResult(
        step_id=step.id,
        executor=step.executor,
        status="skipped",
        error=reason,
        covers=list(step.covers or ()),
        started_s=now,
        finished_s=now,
    )


class PlanSchedule:
    """What every engine's run of one plan shares: dependency counts and the ready heap (steps
    by plan order), results, the latency chain behind `critical_path_s`, the stop reason, and
    waiting for the end (an asyncio future, or the discrete-event clock running until done).

    A subclass keeps its calls in `in_flight` and provides `_pump` (launch what is ready;
    `_resolve` once nothing can happen any more) and `_cancel_in_flight` (cut off at the
    deadline, each cut-off step `_finish`ed with its result)."""

    in_flight: Mapping[str, object]

    def __init__(
        self,
        plan: Plan,
        session: PoolSession,
        task: Task,
        seed: int,
        prior: Mapping[str, StepResult],
        clock: Clock,
        origin: float | None,
        deadline: float | None,
    ):
        self.steps = plan.steps
        self.session = session
        self.task = task
        self.seed = seed
        self.prior = prior
        self.clock = clock
        self.discrete = isinstance(clock, DiscreteEventClock)
        self.origin = clock.time() if origin is None else origin
        self.deadline = deadline
        self.results: dict[str, StepResult] = {}
        self.index = {step.id: i for i, step in enumerate(self.steps)}
        self.waiting = dict.fromkeys(self.index, 0)
        self.children: dict[str, list[str]] = {step.id: [] for step in self.steps}
        for step in self.steps:
            for dep in step.depends_on:
                if dep in self.index:
                    self.waiting[step.id] += 1
                    self.children[dep].append(step.id)
        self.ready = [self.index[sid] for sid, count in self.waiting.items() if count == 0]
        heapq.heapify(self.ready)
        self.chain: dict[str, float] = {}  # longest latency chain ending at each finished step
        self.stop_reason: StopReason | None = None
        self.stop_detail = ""
        self.finished = False
        self.done: asyncio.Future[None] | None = None
        if not self.discrete:
            self.done = clock.create_future()  # type: ignore[attr-defined]

    async def run(self) -> PlanOutcome:
        clock = self.clock
        timer = None
        if self.deadline is not None:
            timer = clock.call_at(self.deadline, self._resolve)
        self._pump()
        if self.done is not None:
            await self.done
        else:
            clock.run_until(lambda: self.finished)  # type: ignore[attr-defined]
        if timer is not None:
            timer.cancel()
        if self.in_flight or (self.ready and self.stop_reason is None):  # woken by the deadline
            self._stop("time_budget", "time budget reached")
            await self._cancel_in_flight()
        now = clock.time() - self.origin
        reason = f"not started: {self.stop_reason}" if self.stop_reason else "not started"
        for step in self.steps:
            if step.id not in self.results:
                self.results[step.id] = skipped_result(step, reason, now)
        return PlanOutcome(
            [self.results[step.id] for step in self.steps],
            self.stop_reason,
            self.stop_detail,
            max(self.chain.values(), default=0.0),
        )

    def _pump(self) -> None:
        raise NotImplementedError

    async def _cancel_in_flight(self) -> None:
        raise NotImplementedError

    def _finish(self, step_id: str, result: StepResult) -> None:
        """Record a step's result; dependents whose last dependency it was become ready."""
        self.results[step_id] = result
        if self.session.on_result is not None:
            self.session.on_result(result)
        step = self.steps[self.index[step_id]]
        chain = self.chain
        chain[step_id] = result.latency_s + max(
            (chain[dep] for dep in step.depends_on if dep in chain), default=0.0
        )
        for child in self.children[step_id]:
            self.waiting[child] -= 1
            if self.waiting[child] == 0:
                heapq.heappush(self.ready, self.index[child])

    def _skipped(self, step: Step, now: float) -> bool:
        """Skip a ready step, with the reason, if a dependency did not end ok or the deadline
        has passed; True if it was skipped."""
        blocked = blocked_reason(step, self._result_of)
        if blocked is None and self.deadline is not None and now >= self.deadline:
            self._stop("time_budget", "time budget reached")
            blocked = self.stop_detail
        if blocked is None:
            return False
        self._finish(step.id, skipped_result(step, blocked, now - self.origin))
        return True

    def _stop(self, reason: StopReason, detail: str) -> None:
        if self.stop_reason is None:
            self.stop_reason, self.stop_detail = reason, detail

    def _resolve(self) -> None:
        if not self.finished:
            self.finished = True
            if self.done is not None:
                self.done.set_result(None)

    def _result_of(self, step_id: str) -> StepResult:
        return self.results.get(step_id) or self.prior[step_id]
