"""The policy protocol: given the episode so far, the next milestone and its plan.

A policy sees the episode through `EpisodeState`, which cannot reach outcomes by its type: the
pool as a `PoolView` (names and profiles, no executors, no simulated world) and the task as its
public view (no gold answers, no suite metadata). Only a `PrivilegedPolicy` (the oracle) is
also handed an `OutcomeOracle`, by the episode loop, and only where the world is simulated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from easy_core.core.params import Params
from easy_core.core.schemas import ExecutorProfile, Milestone, Plan, StepResult, Subtask, Task
from easy_core.executors.pool import CostLedger, ExecutorPool
from easy_core.executors.replay import ReplayExecutor
from easy_core.world.sim_world import SimWorld


@dataclass(frozen=True, slots=True)
class PoolView:
    """What a policy may know of the pool: its name and its executors' profiles (the cards)."""

    name: str
    profiles: tuple[ExecutorProfile, ...]

    @classmethod
    def of(cls, pool: ExecutorPool) -> PoolView:
        return cls(pool.name, tuple(pool.profiles))

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.profiles]

    def profile(self, name: str) -> ExecutorProfile:
        for profile in self.profiles:
            if profile.name == name:
                return profile
        raise KeyError(name)


def public_task(task: Task) -> Task:
    """The task as a policy may read it: no gold final answer, no gold sub-answers, no suite
    metadata (a game's walkthrough, a problem's tests)."""
    return task.model_copy(
        update={
            "answer": "",
            "subtasks": [sub.model_copy(update={"gold": ""}) for sub in task.subtasks],
            "metadata": {},
        }
    )


@dataclass
class EpisodeState:
    task: Task  # the public view (`public_task`)
    pool: PoolView
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


@dataclass(frozen=True)
class OutcomeOracle:
    """Whether an executor would succeed on a subtask of this episode, alone and with correct
    inputs: the simulated world's answer. Built by the episode loop for privileged policies
    only, and only when every executor of the pool is simulated on a sim task."""

    world: SimWorld
    seed: int
    task: Task  # with its golds
    profiles: dict[str, ExecutorProfile]

    def would_succeed(self, subtask: Subtask, executor: str) -> bool:
        return self.world.would_succeed(
            self.seed, self.task, self.task.subtask(subtask.id), self.profiles[executor]
        )


@dataclass(frozen=True)
class RecordedOutcomeOracle:
    """Whether an executor got a subtask of this task right when its outcomes were recorded
    (`easy record`): the oracle of a replayed pool. Built by the episode loop for privileged
    policies only, when every executor of the pool replays a recording or is a tool the replay
    keeps live (whose recorded rows are in the same recording)."""

    task: Task
    replays: dict[str, ReplayExecutor]

    def would_succeed(self, subtask: Subtask, executor: str) -> bool:
        replay = self.replays.get(executor)
        row = None if replay is None else replay.rows.get((executor, self.task.id, subtask.id))
        return row is not None and row.correct


@runtime_checkable
class PrivilegedPolicy(Protocol):
    """A policy that reads outcomes (the oracle: the upper bound of a comparison). The episode
    loop calls `act_with_outcomes` instead of `act`; `outcomes` is None where the world is not
    simulated, and such a policy must then refuse with a clear error."""

    name: str
    privileged: Literal[True]

    async def act_with_outcomes(
        self, state: EpisodeState, outcomes: OutcomeOracle | RecordedOutcomeOracle | None
    ) -> Plan | str: ...
