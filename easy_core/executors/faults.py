"""Fault injection: an executor wrapper that makes a given share of calls time out, fail to
connect, answer HTTP 5xx, return malformed or empty output, or run slow. Draws are deterministic
in (seed, task, step, executor, attempt), so a retry sees a fresh draw and runs are repeatable.
Configured per executor or per pool in the pool YAML (`faults:`)."""

from __future__ import annotations

import asyncio

from easy_core.core.errors import EasyError
from easy_core.core.schemas import FaultRates, StepRequest, StepResult
from easy_core.executors.base import Executor
from easy_core.world.sim_world import unit_hash

HANG_S = 1e9  # an injected timeout never answers; the engine's step timeout ends it


class ExecutorCallError(EasyError):
    """A call to an executor failed before it produced a result; worth retrying."""

    fault = "error"


class ExecutorConnectionError(ExecutorCallError):
    fault = "connection_error"


class ExecutorHTTPError(ExecutorCallError):
    fault = "http_5xx"

    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message

    def __reduce__(self) -> tuple:  # a call on a Dask worker sends its error back pickled
        return (type(self), (self.status, self.message))


FAULT_ORDER = ("timeout", "connection_error", "http_5xx", "malformed", "empty", "slow")


class FaultInjectingExecutor:
    """Wraps an executor; exposes `simulate` only when the wrapped one does."""

    def __init__(self, inner: Executor, rates: FaultRates):
        self.inner = inner
        self.rates = rates
        self.profile = inner.profile
        if hasattr(inner, "simulate"):
            self.simulate = self._simulate
            self.answers_subtasks = getattr(inner, "answers_subtasks", True)

    def draw(self, request: StepRequest) -> str | None:
        """The fault of this call, if any."""
        u = unit_hash(
            f"{request.seed}|{request.task.id}|{request.step_id}|{self.profile.name}|"
            f"{request.attempt}|fault"
        )
        edge = 0.0
        for kind in FAULT_ORDER:
            edge += getattr(self.rates, kind)
            if u < edge:
                return kind
        return None

    def _apply(self, fault: str | None, result: StepResult) -> StepResult:
        if fault is None:
            return result
        if fault == "connection_error":
            raise ExecutorConnectionError(f"{self.profile.name}: connection refused (injected)")
        if fault == "http_5xx":
            raise ExecutorHTTPError(503, f"{self.profile.name}: service unavailable (injected)")
        if fault == "timeout":
            return result.model_copy(update={"latency_s": HANG_S})
        if fault == "slow":
            slow = result.latency_s * self.rates.slow_factor
            return result.model_copy(update={"latency_s": slow})
        output = "" if fault == "empty" else "\ufffd<garbled output>\ufffd"
        return result.model_copy(update={"output": output, "sub_answers": {}})

    def _simulate(self, request: StepRequest) -> StepResult:
        fault = self.draw(request)
        return self._apply(fault, self.inner.simulate(request))  # type: ignore[attr-defined]

    async def run(self, request: StepRequest) -> StepResult:
        fault = self.draw(request)
        if fault == "timeout":
            await asyncio.sleep(HANG_S)
        if fault in ("connection_error", "http_5xx"):
            return self._apply(fault, StepResult(step_id="", executor="", status="failed"))
        result = await self.inner.run(request)
        if fault == "slow":
            await asyncio.sleep(result.latency_s * (self.rates.slow_factor - 1.0))
        return self._apply(fault, result)

    def estimate_input_tokens(self, request: StepRequest) -> int:
        return self.inner.estimate_input_tokens(request)

    def output_token_cap(self, request: StepRequest) -> int:
        return self.inner.output_token_cap(request)
