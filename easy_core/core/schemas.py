"""The data contracts shared by every part of easy (docs/ARCHITECTURE.md, "Contracts").

Everything written to disk carries `schema_version`; readers reject versions they do not know.

One module on purpose: these are the contracts every layer shares, and a reader should find
all of them in one place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SCHEMA_VERSION = 1

Identifier = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")]
Probability = Annotated[float, Field(ge=0.0, le=1.0)]
NonNegative = Annotated[float, Field(ge=0.0)]


class Record(BaseModel):
    """A model written to disk: strict about unknown fields, versioned."""

    model_config = ConfigDict(extra="forbid")
    schema_version: int = SCHEMA_VERSION

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value != SCHEMA_VERSION:
            raise ValueError(
                f"schema_version {value} is not supported by this easy (expects {SCHEMA_VERSION})"
            )
        return value


# --------------------------------------------------------------------------- executors


class DomainCapability(BaseModel):
    """Measured success rate on one domain (skill) and how many samples it rests on."""

    model_config = ConfigDict(extra="forbid")
    success: Probability
    n: int = Field(ge=0, default=0)


class LatencyModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ttft_s: NonNegative = Field(description="time to first token, seconds")
    tokens_per_s: float = Field(gt=0, description="decode speed")
    prefill_tokens_per_s: float = Field(gt=0, default=20_000.0)


class FaultRates(BaseModel):
    """Injected faults per call (fault testing): each a probability; they are exclusive and
    their sum must stay at most 1. `slow` multiplies the latency by `slow_factor`."""

    model_config = ConfigDict(extra="forbid")
    timeout: Probability = 0.0
    connection_error: Probability = 0.0
    http_5xx: Probability = 0.0
    malformed: Probability = 0.0
    empty: Probability = 0.0
    slow: Probability = 0.0
    slow_factor: float = Field(5.0, ge=1.0)

    @model_validator(mode="after")
    def _at_most_one(self) -> FaultRates:
        if self.total > 1.0 + 1e-9:
            raise ValueError(f"fault rates add up to {self.total:.3f}; at most 1 is possible")
        return self

    @property
    def total(self) -> float:
        return (
            self.timeout
            + self.connection_error
            + self.http_5xx
            + self.malformed
            + self.empty
            + self.slow
        )


class ExecutorProfile(Record):
    """Capability and cost of one executor: the language shared by profiling, the orchestrator
    prompt (as an executor card), the simulator and the cost ledger."""

    name: Identifier
    backend: Literal["openai", "hf", "tool", "sim", "replay"]
    endpoint: str | None = Field(
        default=None, description="base URL of an OpenAI-compatible API, e.g. http://host:8000/v1"
    )
    model: str | None = None
    api_key_env: str | None = Field(
        default=None,
        description="name of the environment variable holding the API key (the key itself is "
        "never written in a pool file); None for local endpoints that need no key",
    )
    api_key_secret_block: str | None = Field(
        default=None,
        description="name of a Prefect Secret block holding the API key; flows load it into "
        "`api_key_env` before they run",
    )
    description: str = ""
    price_in_per_1m: NonNegative = Field(description="USD per 1M input tokens")
    price_out_per_1m: NonNegative = Field(description="USD per 1M output tokens")
    latency: LatencyModel
    context_window: int = Field(gt=0)
    max_output_tokens: int = Field(gt=0, default=4096)
    max_concurrency: int = Field(ge=1, default=4)
    capability: dict[str, DomainCapability] = Field(default_factory=dict)
    self_check_reliability: Probability = Field(
        default=0.8, description="probability that the executor's own check of its result is right"
    )
    verbosity: float = Field(gt=0, default=1.0, description="output tokens relative to needed")
    extra_body: dict[str, Any] = Field(
        default_factory=dict,
        description="openai backend: server-specific request fields, e.g. {cache_prompt: true} "
        "for llama.cpp's prefix cache",
    )
    faults: FaultRates | None = Field(
        default=None, description="inject faults into this executor's calls (fault testing)"
    )
    records: str | None = Field(
        default=None,
        description="replay backend: the folder `easy record` wrote for this executor's pool",
    )
    recorded_backend: str | None = Field(
        default=None,
        description="replay backend: the backend the outcomes were recorded on, which the card "
        "shows (a replayed pool reads exactly like the live one)",
    )

    def success_rate(self, skill: str) -> float:
        cap = self.capability.get(skill)
        return cap.success if cap is not None else 0.0

    def cost_usd(self, tokens_in: int, tokens_out: int) -> float:
        return (tokens_in * self.price_in_per_1m + tokens_out * self.price_out_per_1m) / 1e6

    def card(self) -> str:
        """The executor card an orchestrator reads."""
        skills = ", ".join(
            f"{skill} {cap.success:.0%}" for skill, cap in sorted(self.capability.items())
        )
        return (
            f"{self.name} ({self.recorded_backend or self.backend}): "
            f"${self.price_in_per_1m:g}/1M in, "
            f"${self.price_out_per_1m:g}/1M out; ~{self.latency.tokens_per_s:g} tok/s, "
            f"ttft {self.latency.ttft_s:g}s; context {self.context_window}; success: {skills}"
        )


class PoolConfig(Record):
    name: Identifier
    description: str = ""
    executors: list[ExecutorProfile] = Field(min_length=1)
    faults: FaultRates | None = Field(
        default=None, description="faults for every executor without its own `faults`"
    )
    profile: str | None = Field(
        default=None,
        description="measured profile file (written by `easy profile`, relative to the pool "
        "file) whose capabilities and latencies replace the ones written here",
    )

    @model_validator(mode="after")
    def _unique_names(self) -> PoolConfig:
        seen: set[str] = set()
        for profile in self.executors:
            if profile.name in seen:
                raise ValueError(
                    f"executor name {profile.name!r} appears twice; names must be unique"
                )
            seen.add(profile.name)
        return self


class ReplayPool(Record):
    """A pool file that replays another pool's recorded outcomes (the `replay` backend)."""

    name: Identifier
    description: str = ""
    replays: str = Field(description="the live pool file, relative to this one")
    records: str = Field(description="the folder `easy record` wrote, relative to this file")
    live: list[str] = Field(
        default_factory=list,
        description="executors that run as themselves instead of replayed: deterministic "
        "tools whose output follows from the state the episode reached (the textworld game), "
        "which a record made on the gold path cannot serve off it",
    )


class MeasuredExecutor(BaseModel):
    model_config = ConfigDict(extra="forbid")
    capability: dict[str, DomainCapability] = Field(default_factory=dict)
    latency: LatencyModel | None = None


class MeasuredProfile(Record):
    """What `easy profile` measured for a pool: per executor, success per domain and a latency
    model fitted to the calls (intercept = time to first token, slope = decode speed)."""

    pool: str
    suites: list[str]
    n_tasks: int
    seed: int
    executors: dict[str, MeasuredExecutor]

    def apply(self, config: PoolConfig) -> PoolConfig:
        """`config` with measured capabilities (per domain, over the priors) and latencies."""
        executors = []
        for profile in config.executors:
            measured = self.executors.get(profile.name)
            if measured is None:
                executors.append(profile)
                continue
            update: dict[str, Any] = {"capability": {**profile.capability, **measured.capability}}
            if measured.latency is not None:
                update["latency"] = measured.latency
            executors.append(profile.model_copy(update=update))
        return config.model_copy(update={"executors": executors})


# --------------------------------------------------------------------------- tasks


class Subtask(BaseModel):
    """One latent subtask of a sim task. `gold` is for checkers and the oracle only."""

    model_config = ConfigDict(extra="forbid")
    id: Identifier
    skill: str
    difficulty: int = Field(ge=1, le=5)
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=1)
    depends_on: list[str] = Field(default_factory=list)
    gold: str
    instruction: str = Field(
        "",
        description="what a real executor is asked to do for it; empty in the sim suite, "
        "whose executors read only the ids and attributes",
    )


class Task(Record):
    id: Identifier
    suite: str
    split: Literal["train", "validation", "test"]
    family: str = ""
    prompt: str
    answer: str = Field(description="gold final answer; for checkers only")
    subtasks: list[Subtask] = Field(
        default_factory=list, description="in topological order; empty where the suite has none"
    )
    budget_usd: float = Field(gt=0)
    budget_s: float = Field(gt=0)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @cached_property
    def subtask_index(self) -> dict[str, Subtask]:
        return {sub.id: sub for sub in self.subtasks}

    def subtask(self, subtask_id: str) -> Subtask:
        return self.subtask_index[subtask_id]

    @property
    def sink(self) -> Subtask:
        return self.subtasks[-1]


# --------------------------------------------------------------------------- plans


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: Identifier
    executor: str = Field(min_length=1)
    instruction: str
    depends_on: list[str] = Field(default_factory=list)
    covers: list[str] | None = None


class Plan(BaseModel):
    """One orchestrator turn (docs/ARCHITECTURE.md, "Contracts"). `final_answer` ends the
    episode."""

    model_config = ConfigDict(extra="forbid")
    milestone: str = ""
    steps: list[Step] = Field(default_factory=list)
    final_answer: str | None = None


StepStatus = Literal["ok", "failed", "skipped"]


class OutcomeRecord(BaseModel):
    """One executor's outcome on one subtask, alone, with right prerequisites as its inputs: a
    row of a recording (`easy record`), what the `replay` backend serves."""

    suite: str
    split: str
    task_id: str
    subtask_id: str
    skill: str
    executor: str
    status: StepStatus
    output: str
    error: str | None = None
    correct: bool
    tokens_in: int
    tokens_out: int
    latency_s: float
    cost_usd: float
    inputs_from: dict[str, str] = Field(
        default_factory=dict,
        description="prerequisite -> the executor whose recorded right output was this row's "
        "input; absent: its gold answer was",
    )
    informative: bool = Field(
        default=True,
        description="false for a subtask any answer passes (a spare move of a won game): "
        "recorded so that replay can serve it, never counted in a profile",
    )


class StepResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    step_id: str
    executor: str
    status: StepStatus
    output: str = ""
    error: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    started_s: float = 0.0
    finished_s: float = 0.0
    self_check: bool | None = None
    covers: list[str] = Field(default_factory=list)
    sub_answers: dict[str, str] = Field(default_factory=dict)
    attempts: int = 1
    faults: list[str] = Field(
        default_factory=list, description="what went wrong in earlier attempts, in order"
    )


class Milestone(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: int
    plan: Plan
    results: list[StepResult] = Field(default_factory=list)
    error: str | None = None
    started_s: float = 0.0
    finished_s: float = 0.0
    critical_path_s: float = 0.0


EndReason = Literal[
    "final_answer", "max_milestones", "cost_budget", "time_budget", "invalid_plan", "policy_error"
]


class RewardBreakdown(BaseModel):
    model_config = ConfigDict(extra="forbid")
    correct: float
    efficiency: float
    completeness: float
    total: float


class RunMetrics(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cost_usd: float = 0.0
    makespan_s: float = 0.0
    critical_path_s: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    n_milestones: int = 0
    n_steps: int = 0
    n_failed: int = 0
    n_skipped: int = 0
    n_faults: int = 0
    n_retries: int = 0
    n_fallbacks: int = 0
    orchestrator_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out


class Trajectory(Record):
    task_id: str
    suite: str
    policy: str
    pool: str
    seed: int
    sequential: bool = False
    milestones: list[Milestone] = Field(default_factory=list)
    final_answer: str | None = None
    correct: bool = False
    scores: dict[str, float] = Field(
        default_factory=dict, description="the suite's graded scores of the answer (e.g. F1)"
    )
    end_reason: EndReason
    end_detail: str = ""
    budget_usd: float
    budget_s: float
    metrics: RunMetrics
    reward: RewardBreakdown


class EvalMetrics(Record):
    suite: str
    policy: str
    pool: str
    split: str
    n: int
    first_task: int = 0
    seed: int
    sequential: bool
    success_rate: float
    success_ci95: tuple[float, float]
    mean_cost_usd: float
    mean_makespan_s: float
    mean_tokens: float
    mean_reward: float
    mean_reward_correct: float
    mean_reward_efficiency: float
    mean_reward_completeness: float
    end_reasons: dict[str, int]
    suite_scores: dict[str, float] = Field(
        default_factory=dict, description="suite-specific means, e.g. token F1 on `research`"
    )

    @field_validator("success_rate", "mean_cost_usd", "mean_makespan_s", "mean_reward")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be finite")
        return value


def approx_tokens(text: str) -> int:
    """Rough token count of plain text (4 characters a token), for estimates only."""
    return (len(text) + 3) // 4


@dataclass(slots=True)
class StepRequest:
    """What an executor receives for one step; `inputs` are the results of the step's direct
    dependencies, the only context it is given."""

    step_id: str
    instruction: str
    task: Task
    covers: tuple[str, ...] = ()
    inputs: tuple[StepResult, ...] = ()
    max_output_tokens: int = 4096
    seed: int = 0
    attempt: int = 0  # retries of a step count up; injected faults draw anew per attempt
