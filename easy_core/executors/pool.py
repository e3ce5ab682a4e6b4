"""Executor pools: the registry built from a pool YAML, per-executor concurrency limits, and the
per-episode cost ledger that enforces the hard budget."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Protocol

from easy_core.core.config import load_yaml_mapping, load_yaml_model, validate_model
from easy_core.core.errors import ConfigError
from easy_core.core.params import Params
from easy_core.core.schemas import (
    ExecutorProfile,
    MeasuredProfile,
    PoolConfig,
    ReplayPool,
    StepResult,
)
from easy_core.executors.base import Executor
from easy_core.executors.faults import FaultInjectingExecutor
from easy_core.executors.hf_settings import HFSettings
from easy_core.executors.openai_http import OpenAIExecutor
from easy_core.executors.python_tool import PythonToolExecutor
from easy_core.executors.replay import ReplayExecutor
from easy_core.executors.retrieve import RetrieveExecutor
from easy_core.executors.simulated import SimExecutor
from easy_core.world.sim_world import SimWorld

ExecutorFactory = Callable[[ExecutorProfile, "BackendContext"], Executor]


@dataclass
class BackendContext:
    """What backends may need besides their profile."""

    world: SimWorld = field(default_factory=SimWorld)
    hf: HFSettings = field(default_factory=HFSettings)


def _hf(profile: ExecutorProfile, context: BackendContext) -> Executor:
    from easy_core.executors.hf_local import HFExecutor  # imports torch and transformers

    if not profile.model:
        raise ConfigError(
            f"executor {profile.name!r}: backend 'hf' needs `model`: a packaged model "
            "(smollm2-135m, gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b) or a checkpoint "
            "folder"
        )
    return HFExecutor(profile, context.hf)


def _textworld_tool(profile: ExecutorProfile) -> Executor:
    from easy_core.executors.textworld_tool import TextWorldExecutor  # textworld loads on use

    return TextWorldExecutor(profile)


def _tool(profile: ExecutorProfile, context: BackendContext) -> Executor:
    tools = {
        "retrieve-bm25": lambda p: RetrieveExecutor(p, "bm25"),
        "retrieve-embed": lambda p: RetrieveExecutor(p, "embed"),
        "textworld": _textworld_tool,
        "python": PythonToolExecutor,
    }
    factory = tools.get(profile.model or "")
    if factory is None:
        raise ConfigError(
            f"executor {profile.name!r}: backend 'tool' needs `model` set to one of: "
            f"{', '.join(sorted(tools))} (got {profile.model!r})"
        )
    return factory(profile)


BACKENDS: dict[str, ExecutorFactory] = {
    "sim": lambda profile, ctx: SimExecutor(profile, ctx.world),
    "tool": _tool,
    "openai": lambda profile, ctx: OpenAIExecutor(profile),
    "hf": _hf,
    "replay": lambda profile, ctx: ReplayExecutor(profile),
}


def load_pool_config(path: str | Path) -> PoolConfig:
    """A pool file, with its measured profile applied when the pool names one that exists
    (before the first `easy profile` run the pool's own priors stand). A replay pool file
    (`replays:` a pool file, `records:` its recording) is that pool, replayed."""
    data = load_yaml_mapping(path)
    if "replays" in data:
        spec = validate_model(data, ReplayPool, str(path))
        here = Path(path).parent
        return replayed(
            load_pool_config(here / spec.replays), here / spec.records, spec.name, spec.live
        )
    config = validate_model(data, PoolConfig, str(path))
    if config.profile is not None:
        measured = Path(path).parent / config.profile
        if measured.is_file():
            config = load_yaml_model(measured, MeasuredProfile).apply(config)
    return config


class ExecutorPool:
    """Executors by name, with the pool config they came from."""

    def __init__(self, config: PoolConfig, executors: dict[str, Executor]):
        self.config = config
        self.executors = executors

    @classmethod
    def from_config(
        cls,
        config: PoolConfig,
        context: BackendContext | None = None,
        truth: PoolConfig | None = None,
    ) -> ExecutorPool:
        """`truth`: when `config`'s cards are a measured profile, the pool file it measured; its
        simulated executors' world draws from the file's values."""
        context = context or BackendContext()
        true = {p.name: p for p in truth.executors} if truth is not None else {}
        executors: dict[str, Executor] = {}
        for profile in config.executors:
            factory = BACKENDS.get(profile.backend)
            if factory is None:
                raise ConfigError(
                    f"pool {config.name!r}: executor {profile.name!r} has backend "
                    f"{profile.backend!r}, which this install cannot run; available: "
                    f"{', '.join(sorted(BACKENDS))}"
                )
            executor = factory(profile, context)
            if isinstance(executor, SimExecutor) and profile.name in true:
                executor.truth = true[profile.name]
            faults = profile.faults or config.faults
            if faults is not None and faults.total > 0:
                executor = FaultInjectingExecutor(executor, faults)
            executors[profile.name] = executor
        return cls(config, executors)

    @classmethod
    def from_yaml(cls, path: str | Path, context: BackendContext | None = None) -> ExecutorPool:
        return cls.from_config(load_pool_config(path), context)

    @classmethod
    def of(cls, name: str, executors: list[Executor]) -> ExecutorPool:
        """A pool of ready-made executor objects (custom backends, tests)."""
        config = PoolConfig(name=name, executors=[e.profile for e in executors])
        return cls(config, {e.profile.name: e for e in executors})

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def profiles(self) -> list[ExecutorProfile]:
        return self.config.executors

    def profile(self, name: str) -> ExecutorProfile:
        return self.executors[name].profile

    def session(
        self,
        budget_usd: float,
        shared: SlotProvider | None = None,
        on_result: Callable[[StepResult], None] | None = None,
    ) -> PoolSession:
        """A new episode's view of the pool. `shared`: slots shared with other episodes (the
        service's dispatcher) instead of the episode's own; `on_result`: called with every
        step result as it is recorded (the service streams them)."""
        return PoolSession(self, CostLedger(budget_usd), shared, on_result)


class LedgerEntry(NamedTuple):
    step_id: str
    executor: str
    cost_usd: float


class CostLedger:
    """Spend of one episode. A step reserves its worst-case cost before it starts and settles
    the real cost when it ends, so spend never passes the budget even with steps in flight."""

    def __init__(self, budget_usd: float):
        self.budget_usd = budget_usd
        self.spent_usd = 0.0
        self.reserved_usd = 0.0
        self.entries: list[LedgerEntry] = []

    @property
    def remaining_usd(self) -> float:
        return self.budget_usd - self.spent_usd - self.reserved_usd

    def try_reserve(self, amount_usd: float) -> bool:
        if amount_usd > self.remaining_usd + 1e-15:
            return False
        self.reserved_usd += amount_usd
        return True

    def settle(self, step_id: str, executor: str, reserved_usd: float, cost_usd: float) -> float:
        """Release the reservation and charge the real cost, capped at what was reserved (a
        reservation is the most a step may cost). Returns the charged amount."""
        charged = min(cost_usd, reserved_usd)
        self.reserved_usd = max(0.0, self.reserved_usd - reserved_usd)
        self.spent_usd += charged
        self.entries.append(LedgerEntry(step_id, executor, charged))
        return charged


@dataclass(eq=False, slots=True)
class SlotTicket:
    """What a step waiting for a slot tells a shared dispatcher about itself, so that its
    release rule can choose among the steps of many episodes (`runtime.dispatcher`)."""

    episode: int  # which episode (request) the step belongs to
    arrival_s: float  # clock time the episode arrived
    prefix: str  # the prompt prefix it shares with its episode's other steps
    text: str  # what the step asks (for similarity-based dispatch)
    expected_s: float  # the latency its executor's profile predicts
    downstream_s: float = 0.0  # predicted time of the longest chain of steps waiting on it
    worker: int | None = None  # the slot that runs it, once started
    ready_s: float = 0.0  # clock time it began to wait for a slot
    started_s: float = 0.0  # clock time it got one
    bypassed: int = 0  # times another step was chosen before it


class Slots(Protocol):
    """An executor's concurrency slots as an engine uses them."""

    def acquire(self, start: Callable[[], None], ticket: SlotTicket | None = None) -> bool: ...

    def release(self, ticket: SlotTicket | None = None) -> None: ...

    def withdraw(self, start: Callable[[], None]) -> None: ...


class ExecutorSlots:
    """FIFO concurrency slots of one executor. `acquire(start)` calls `start` now if a slot is
    free and returns True; otherwise queues it, to be called when a slot is released. The ticket
    is for dispatchers that choose among waiting steps; FIFO slots ignore it."""

    def __init__(self, capacity: int):
        self.free = capacity
        self.queue: deque[Callable[[], None]] = deque()

    def acquire(self, start: Callable[[], None], ticket: SlotTicket | None = None) -> bool:
        if self.free > 0 and not self.queue:
            self.free -= 1
            start()
            return True
        self.queue.append(start)
        return False

    def release(self, ticket: SlotTicket | None = None) -> None:
        if self.queue:
            self.queue.popleft()()
        else:
            self.free += 1

    def withdraw(self, start: Callable[[], None]) -> None:
        self.queue.remove(start)


class CircuitBreaker:
    """Opens after `threshold` consecutive failures of an executor; while open (for `cooldown_s`
    of clock time) the executor is skipped; then one call is let through to probe it."""

    def __init__(self, threshold: int, cooldown_s: float):
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self.failures = 0
        self.opened_at: float | None = None

    def allows(self, now: float) -> bool:
        return self.opened_at is None or now - self.opened_at >= self.cooldown_s

    def failure(self, now: float) -> None:
        self.failures += 1
        if self.failures >= self.threshold:
            self.opened_at = now

    def success(self) -> None:
        self.failures = 0
        self.opened_at = None


class SlotProvider(Protocol):
    """Concurrency slots shared by many episodes: one queue per executor."""

    def slots(self, name: str) -> Slots: ...

    def episode_id(self) -> int: ...


class PoolSession:
    """The pool as one episode sees it: its own ledger, and its own concurrency slots unless
    they are `shared` with other episodes (then steps carry a `SlotTicket`)."""

    def __init__(
        self,
        pool: ExecutorPool,
        ledger: CostLedger,
        shared: SlotProvider | None = None,
        on_result: Callable[[StepResult], None] | None = None,
    ):
        self.pool = pool
        self.ledger = ledger
        self.shared = shared
        self.on_result = on_result
        self.episode = shared.episode_id() if shared is not None else 0
        self.arrival_s: float | None = None  # set by the episode runner when it starts
        if shared is None:
            self._slots: dict[str, Slots] = {
                name: ExecutorSlots(executor.profile.max_concurrency)
                for name, executor in pool.executors.items()
            }
        else:
            self._slots = {name: shared.slots(name) for name in pool.executors}
        self._breakers: dict[str, CircuitBreaker] = {}

    def executor(self, name: str) -> Executor:
        return self.pool.executors[name]

    def existing_breaker(self, name: str) -> CircuitBreaker | None:
        return self._breakers.get(name)

    def breaker(self, name: str, threshold: int, cooldown_s: float) -> CircuitBreaker:
        breaker = self._breakers.get(name)
        if breaker is None:
            breaker = self._breakers[name] = CircuitBreaker(threshold, cooldown_s)
        return breaker

    def slots(self, name: str) -> Slots:
        return self._slots[name]


def load_pool_context(params: Params) -> BackendContext:
    """What a pool's backends are built with: the simulated world and the in-process settings."""
    hf = HFSettings(
        params.executors.hf_threads,
        params.executors.hf_batch_size,
        params.executors.hf_batch_window_s,
    )
    return BackendContext(world=SimWorld(params.sim, params.capability), hf=hf)


def load_pool(path: str | Path, params: Params) -> ExecutorPool:
    """The pool file with its measured cards: its own `profile:`, or else (params.profile.apply)
    the profile stage's measurement of it, `<profile.out_dir>/<file stem>.yaml`, once written."""
    config = load_pool_config(path)
    measured = Path(params.profile.out_dir) / f"{Path(path).stem}.yaml"
    if config.profile is None and params.profile.apply and measured.is_file():
        cards = load_yaml_model(measured, MeasuredProfile).apply(config)
        return ExecutorPool.from_config(cards, load_pool_context(params), truth=config)
    return ExecutorPool.from_config(config, load_pool_context(params))


def replayed(
    config: PoolConfig,
    records: str | Path,
    name: str | None = None,
    live: list[str] | tuple[str, ...] = (),
) -> PoolConfig:
    """The pool with every executor served from its recorded outcomes in `records` (the
    `replay` backend), except those in `live`, which stay as they are; the cards read as the
    live pool's."""
    names = [profile.name for profile in config.executors]
    unknown = sorted(set(live) - set(names))
    if unknown:
        raise ConfigError(
            f"replay of pool {config.name!r}: `live` names {unknown}, which the pool does not "
            f"have; name some of {names}"
        )
    executors = [
        profile
        if profile.name in live
        else profile.model_copy(
            update={
                "backend": "replay",
                "recorded_backend": profile.recorded_backend or profile.backend,
                "records": str(records),
                "endpoint": None,
                "faults": None,
            }
        )
        for profile in config.executors
    ]
    return config.model_copy(
        update={"name": name or f"{config.name}-replay", "executors": executors, "faults": None}
    )


def sim_replay(config: PoolConfig) -> PoolConfig:
    """The pool with every executor replaced by a sim executor of the same profile: what the
    simulator believes about it, runnable on any suite whose tasks have subtasks."""
    executors = [
        profile.model_copy(update={"backend": "sim", "endpoint": None, "faults": None})
        for profile in config.executors
    ]
    return config.model_copy(
        update={"name": f"{config.name}-sim", "executors": executors, "faults": None}
    )
