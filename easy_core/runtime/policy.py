"""The policy protocol: given the episode so far, the next milestone and its plan."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from easy_core.core.params import Params
from easy_core.core.schemas import Milestone, Plan, StepResult, Task
from easy_core.executors.pool import CostLedger, ExecutorPool


@dataclass
class EpisodeState:
    task: Task
    pool: ExecutorPool
    params: Params
    seed: int
    ledger: CostLedger
    milestones: list[Milestone] = field(default_factory=list)
    results: dict[str, StepResult] = field(default_factory=dict)
    elapsed_s: float = 0.0
    repair_error: str | None = None
    scratch: dict[str, Any] = field(default_factory=dict)  # a policy's per-episode cache

    @property
    def remaining_usd(self) -> float:
        return self.ledger.remaining_usd

    @property
    def remaining_s(self) -> float:
        return self.task.budget_s - self.elapsed_s

    @property
    def milestones_left(self) -> int:
        return self.params.runtime.max_milestones - len(self.milestones)


class Policy(Protocol):
    """A policy may set `synchronous = True` when `act` never waits on anything; the runtime
    can then simulate its episodes without an event loop."""

    name: str

    async def act(self, state: EpisodeState) -> Plan | str:
        """The next turn: a Plan, or raw JSON text (an LLM's output) that the runtime parses.
        `state.repair_error` is set when the previous turn was invalid and may be repaired."""
        ...
