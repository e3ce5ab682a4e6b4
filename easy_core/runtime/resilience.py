"""The resilience policy: what counts as a failed call (`fault_of`), the results of a call that
raised or ran past its timeout, the timeout a call gets from its profile, and which executor a
failed step falls back to. Retries, backoff and circuit breakers are applied by the engines
with `params.resilience`; the decisions live here so every engine makes the same ones.
"""

from __future__ import annotations

from easy_core.core.schemas import Step, StepRequest, StepResult
from easy_core.executors.base import Executor
from easy_core.executors.faults import ExecutorCallError


def executor_error_result(step: Step, request: StepRequest, exc: Exception) -> StepResult:
    """An executor raised: the call failed (the episode goes on)."""
    result = failed_result(step, f"executor error: {type(exc).__name__}: {exc}", request.covers)
    result.faults = [exc.fault if isinstance(exc, ExecutorCallError) else "error"]
    return result


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
