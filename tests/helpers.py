"""Test executors and strategies shared by the test modules."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from hypothesis import strategies as st

from easy_core.core.schemas import (
    ExecutorProfile,
    LatencyModel,
    Plan,
    Step,
    StepRequest,
    StepResult,
)
from easy_core.policies.llm import record_answer


@dataclass
class Call:
    step_id: str
    started: float
    finished: float
    instruction: str


def python_tool_profile(**capability: dict) -> ExecutorProfile:
    """The python tool's card, as pool files declare it."""
    return ExecutorProfile(
        name="python",
        backend="tool",
        model="python",
        price_in_per_1m=0.0,
        price_out_per_1m=0.0,
        latency=LatencyModel(ttft_s=0.1, tokens_per_s=1000),
        context_window=100_000,
        capability=capability,
    )


class ScriptedExecutor:
    """Waits a scripted latency per step on the loop's clock; can fail, hang or raise."""

    def __init__(
        self,
        name: str = "scripted",
        latency: dict[str, float] | float = 1.0,
        *,
        fail: set[str] = frozenset(),  # type: ignore[assignment]
        raise_on: set[str] = frozenset(),  # type: ignore[assignment]
        max_concurrency: int = 1000,
        price_per_1m: float = 0.0,
        tokens: int = 100,
    ):
        self.profile = ExecutorProfile(
            name=name,
            backend="tool",
            price_in_per_1m=price_per_1m,
            price_out_per_1m=price_per_1m,
            latency=LatencyModel(ttft_s=0.0, tokens_per_s=1000.0),
            context_window=100_000,
            max_concurrency=max_concurrency,
        )
        self.latency = latency
        self.fail = fail
        self.raise_on = raise_on
        self.tokens = tokens
        self.calls: list[Call] = []

    def latency_of(self, step_id: str) -> float:
        return self.latency[step_id] if isinstance(self.latency, dict) else self.latency

    async def run(self, request: StepRequest) -> StepResult:
        loop = asyncio.get_running_loop()
        started = loop.time()
        latency = self.latency_of(request.step_id)
        await asyncio.sleep(latency)
        self.calls.append(Call(request.step_id, started, loop.time(), request.instruction))
        if request.step_id in self.raise_on:
            raise RuntimeError(f"boom in {request.step_id}")
        failed = request.step_id in self.fail
        return StepResult(
            step_id=request.step_id,
            executor=self.profile.name,
            status="failed" if failed else "ok",
            error="scripted failure" if failed else None,
            output=f"out-{request.step_id}",
            tokens_in=self.tokens,
            tokens_out=self.tokens,
            cost_usd=self.profile.cost_usd(self.tokens, self.tokens),
            latency_s=latency,
        )

    def estimate_input_tokens(self, request: StepRequest) -> int:
        return self.tokens

    def output_token_cap(self, request: StepRequest) -> int:
        return self.tokens


class WrittenAnswers:
    """An orchestrator that writes the given texts, one per turn, through the LLM policy's own
    answer handling (`record_answer`)."""

    name = "easy"

    def __init__(self, texts: list[str]):
        self.texts = texts

    async def act(self, state):  # noqa: ANN001, ANN201
        return record_answer(state, self.texts[len(state.milestones)], 10)


def make_plan(steps: list[tuple[str, list[str]]], executor: str = "scripted") -> Plan:
    return Plan(
        steps=[
            Step(id=sid, executor=executor, instruction=f"do {sid}", depends_on=deps)
            for sid, deps in steps
        ]
    )


@st.composite
def random_dags(draw, max_nodes: int = 25, min_nodes: int = 1):
    """(step id, dependency ids) lists of a random acyclic plan, listed in a random order."""
    n = draw(st.integers(min_nodes, max_nodes))
    edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    deps: dict[int, set[int]] = {i: set() for i in range(n)}
    for a, b in edges:
        if a < b:
            deps[b].add(a)
    order = draw(st.permutations(range(n)))
    return [(f"s{i}", sorted(f"s{d}" for d in deps[i])) for i in order]
