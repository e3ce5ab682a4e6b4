"""The `python` tool: runs the step's instruction (or the ```python block in it) as a program in
the sandbox and answers with what it printed. A program that ends in a bare expression prints
its value, as a notebook cell does: small models often end a program that way. A program sees
its dependencies' outputs as `inputs`, a dict from step id to text: how a test program reaches
the code another step wrote without pasting it into its own source."""

from __future__ import annotations

import ast
import asyncio
import re
import time

from easy_core.core.schemas import ExecutorProfile, StepRequest, StepResult, approx_tokens
from easy_core.executors.base import step_result
from easy_core.world.sandbox import SandboxLimits, run_python

FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


def extract_code(instruction: str) -> str:
    block = FENCE.search(instruction)
    return block.group(1) if block else instruction


def printing_last_expression(code: str) -> str:
    """`code` with a final bare expression (not a call of print) wrapped in print()."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code  # the sandbox reports the error
    last = tree.body[-1] if tree.body else None
    if not isinstance(last, ast.Expr) or last.col_offset > 0:  # `a = 1; a`: left alone
        return code
    call = last.value
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print":
        return code
    lines = code.splitlines()
    head = "\n".join(lines[: last.lineno - 1])
    return f"{head}\nprint({ast.unparse(call)})\n"


class PythonToolExecutor:
    wall_clock = True  # waits on real work: episodes using it run in wall time
    deterministic = True  # the same program fails the same way: the engine does not retry it

    def __init__(self, profile: ExecutorProfile, limits: SandboxLimits | None = None):
        self.profile = profile
        self.limits = limits or SandboxLimits()

    async def run(self, request: StepRequest) -> StepResult:
        code = printing_last_expression(extract_code(request.instruction))
        inputs = {result.step_id: result.output for result in request.inputs}
        started = time.monotonic()
        outcome = await asyncio.to_thread(run_python, f"inputs = {inputs!r}\n{code}", self.limits)
        latency = time.monotonic() - started
        tokens_in, tokens_out = approx_tokens(code), max(1, approx_tokens(outcome.stdout))
        if outcome.ok:
            status, error = "ok", None
        elif outcome.timed_out:
            status, error = "failed", f"killed after {self.limits.wall_s:g}s (time limit)"
        elif outcome.returncode < 0:
            status, error = (
                "failed",
                f"killed by signal {-outcome.returncode} (CPU or memory limit)",
            )
        else:
            last = outcome.stderr.strip().splitlines()[-1:] or ["no output"]
            status, error = "failed", f"exit {outcome.returncode}: {last[0]}"
        return step_result(
            self.profile,
            request,
            status=status,
            output=outcome.stdout.strip(),
            error=error,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            latency_s=latency,
        )

    def estimate_input_tokens(self, request: StepRequest) -> int:
        return approx_tokens(request.instruction)

    def output_token_cap(self, request: StepRequest) -> int:
        return approx_tokens("x" * self.limits.output_chars)
