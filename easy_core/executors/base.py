"""The executor protocol every backend implements."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from easy_core.core.schemas import ExecutorProfile, StepRequest, StepResult, StepStatus


class Executor(Protocol):
    profile: ExecutorProfile

    async def run(self, request: StepRequest) -> StepResult:
        """Run the step. Failures are reported in the result (status "failed", `error`), not
        raised; the engine adds timing, timeouts and cancellation."""
        ...

    def estimate_input_tokens(self, request: StepRequest) -> int:
        """Input tokens the step will be charged for (an upper estimate), so the ledger can
        refuse a step before it starts."""
        ...

    def output_token_cap(self, request: StepRequest) -> int:
        """The most output tokens this step can be charged for: the `max_tokens` an LLM backend
        sends, or what a deterministic backend knows it will produce."""
        ...


def step_result(
    profile: ExecutorProfile,
    request: StepRequest,
    *,
    output: str = "",
    tokens_in: int = 0,
    tokens_out: int = 0,
    latency_s: float = 0.0,
    status: StepStatus = "ok",
    error: str | None = None,
) -> StepResult:
    """A real backend's result for `request`, charged at the profile's prices."""
    return StepResult(
        step_id=request.step_id,
        executor=profile.name,
        status=status,
        output=output,
        error=error,
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        cost_usd=profile.cost_usd(tokens_in, tokens_out),
        latency_s=latency_s,
        covers=list(request.covers),
    )


async def run_simulated(
    simulate: Callable[[StepRequest], StepResult], request: StepRequest
) -> StepResult:
    """A simulating executor's `run`: the result it knows at once, after waiting its latency on
    the loop's clock (at once on the virtual-time loop)."""
    result = simulate(request)
    if result.latency_s > 0:
        await asyncio.sleep(result.latency_s)
    return result
