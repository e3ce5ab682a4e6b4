"""The resilience policy: what counts as a failed call (`fault_of`), the results of a call that
raised or ran past its timeout, the timeout a call gets from its profile, and which executor a
failed step falls back to. Retries, backoff and circuit breakers are applied by the engines
with `params.resilience`; the decisions live here so every engine makes the same ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from easy_core.core.capability import expected_success
from easy_core.core.schemas import Step, StepRequest, StepResult, Task
from easy_core.executors.base import Executor
from easy_core.executors.faults import ExecutorCallError


def executor_error_result(step: Step, request: StepRequest, exc: Exception) -> StepResult:
    """An executor raised: the call failed (the episode goes on)."""
    result = failed_result(step, f"executor error: {type(exc).__name__}: {exc}", request.covers)
    result.faults = [exc.fault if isinstance(exc, ExecutorCallError) else "error"]
    return result


def answers_subtasks(executor: object) -> bool:
    """Whether the executor answers each subtask a step covers in `sub_answers` (the simulator),
    so that a missing answer is a fault; real outputs, live or replayed, are free text."""
    return hasattr(executor, "simulate") and getattr(executor, "answers_subtasks", True)


def fault_of(result: StepResult, answers_subtasks: bool = True) -> str | None:
    """What is wrong with a call's result, or None when it is usable: a failure, an empty
    output, or (from an executor that answers subtasks, like the simulator) a malformed one
    with no answer for a subtask the step covers."""
    if result.status == "failed":
        if result.faults:
            return result.faults[-1]
        return "timeout" if (result.error or "").startswith("timeout") else "failed"
    if (
        answers_subtasks
        and result.covers
        and any(c not in result.sub_answers for c in result.covers)
    ):
        return "empty" if not result.output.strip() else "malformed"
    if not result.output.strip():
        return "empty"
    return None


def timed_out_result(
    step: Step, request: StepRequest, executor: Executor, timeout_s: float
) -> StepResult:
    """The step ran past its timeout; its input was sent and is charged."""
    tokens_in = executor.estimate_input_tokens(request)
    return failed_result(
        step,
        f"timeout after {timeout_s:g}s",
        request.covers,
        tokens_in=tokens_in,
        cost_usd=executor.profile.cost_usd(tokens_in, 0),
        latency_s=timeout_s,
    )


def failed_result(step: Step, error: str, covers: tuple[str, ...], **fields: float) -> StepResult:
    return StepResult(
        step_id=step.id,
        executor=step.executor,
        status="failed",
        error=error,
        covers=list(covers),
        **fields,  # type: ignore[arg-type]
    )


def call_timeout(expected_s: float, step_timeout_s: float, step_timeout_factor: float) -> float:
    """A call's timeout: `step_timeout_factor` times the latency its profile predicts for the
    request (`expected_s`), at most `step_timeout_s` (a factor of 0: always `step_timeout_s`)."""
    if not step_timeout_factor:
        return step_timeout_s
    return min(step_timeout_s, step_timeout_factor * expected_s)


def fallback_executor(
    step: Step,
    task: Task,
    executors: Mapping[str, Executor],
    tried: list[str],
    current: str,
    allows: Callable[[str], bool],
    difficulty_slope: float,
    best_effort: bool = False,
) -> str | None:
    """The cheapest executor not tried yet (and `allows`: not behind an open breaker) that
    declares the skills of the step's subtasks and is at least as capable on them as `current`;
    without subtasks, at least as pricey.
    `best_effort`: if there is none, the most capable of the others."""

    def capability(name: str) -> float:
        profile = executors[name].profile
        if not step.covers:
            return profile.price_in_per_1m + profile.price_out_per_1m
        return min(
            expected_success(profile, s.skill, s.difficulty, difficulty_slope)
            for s in (task.subtask(c) for c in step.covers)
        )

    floor = capability(current)
    skills = {task.subtask(c).skill for c in step.covers or ()}
    others = [
        n
        for n in executors
        if n not in tried
        and allows(n)
        # never a fallback that does not declare the step's skills (a game tool for math)
        and skills <= executors[n].profile.capability.keys()
    ]
    candidates = [name for name in others if capability(name) >= floor]
    if not candidates:
        return max(others, key=capability, default=None) if best_effort else None
    return min(
        candidates,
        key=lambda n: (
            executors[n].profile.price_in_per_1m + executors[n].profile.price_out_per_1m,
            n,
        ),
    )
