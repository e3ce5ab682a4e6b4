"""One dispatcher for every in-flight episode of a service: per executor, one queue that holds
the executor's concurrency limit across all requests, and a release rule that picks which
waiting step runs when a slot frees.

Episodes reach it through `PoolSession(shared=dispatcher)`: the local engine then hands each
step's `SlotTicket` (its episode, arrival, prompt prefix, text, predicted latency and the
predicted chain behind it) to the executor's `ExecutorLane` instead of the episode's own FIFO
slots. The rules (`params.serve.release`):

- `eager`: FIFO, the order steps became ready in;
- `tail_risk`: the mean-CVaR index of `runtime.release` (`release_index`): the step whose
  episode's projected flow time (its age, the step, the chain behind it) is most at risk in the
  tail, per second of its own service; service times are learnt online per executor as a ratio
  to the profile's prediction, and the tail threshold from recent episodes' flow times (the
  simulation's adaptive in-flight window is not needed here: the lane is the executor's own
  queue, so a chosen step starts the moment its slot frees, with no transit to cover);
- `prefix`: a step whose prompt prefix the executor served recently (its server's prefix cache
  holds it) goes first, oldest first, with a bypass limit (`runtime.prefix_order.next_step`);
- `coact`: CoAct's contrastive online dispatch: when worker w frees, the waiting step x that
  minimises  -sim(x, path_w) + contrast * mean_{v != w} sim(x, path_v), where a worker's path is
  the mean embedding (packaged MiniLM) of the steps it ran last: related steps stay on one
  worker's path, unrelated ones go elsewhere.

Choice rules are pure functions of the waiting tickets and the lane, tested one by one.
"""

from __future__ import annotations

import itertools
import math
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from easy_core.core.errors import ConfigError
from easy_core.core.params import ReleaseParams, ServeParams
from easy_core.core.schemas import approx_tokens
from easy_core.core.stats import quantile
from easy_core.executors.pool import ExecutorPool, SlotTicket
from easy_core.runtime.prefix_order import PrefixCache, next_step
from easy_core.runtime.release import release_index

Embed = Callable[[list[str]], np.ndarray]
RULES = ("eager", "tail_risk", "prefix", "coact")


@dataclass(eq=False)
class _Waiting:
    ticket: SlotTicket
    start: Callable[[], None]


@dataclass(eq=False)
class LaneStats:
    """What one executor's lane saw: steps started and how long each waited for a slot."""

    started: int = 0
    wait_total_s: float = 0.0
    max_waiting: int = 0

    @property
    def mean_wait_s(self) -> float:
        return self.wait_total_s / self.started if self.started else 0.0


class ExecutorLane:
    """One executor's slots shared by every episode: `capacity` workers, the steps waiting for
    one, and the rule that picks among them. The interface of `executors.pool.Slots`."""

    def __init__(self, name: str, capacity: int, rule: ReleaseRule, clock: Callable[[], float]):
        self.name = name
        self.capacity = capacity
        self.rule = rule
        self._now = clock
        self.idle: list[int] = list(range(capacity - 1, -1, -1))  # free worker ids, a stack
        self.waiting: list[_Waiting] = []  # in the order they began to wait
        self.running: dict[int, SlotTicket] = {}  # worker -> its step
        self.stats = LaneStats()

    def acquire(self, start: Callable[[], None], ticket: SlotTicket | None = None) -> bool:
        if ticket is None:
            raise TypeError(f"{self.name}: a shared lane needs each step's SlotTicket")
        ticket.ready_s = self._now()
        if self.idle and not self.waiting:
            self._run(self.idle.pop(), _Waiting(ticket, start))
            return True
        self.waiting.append(_Waiting(ticket, start))
        self.stats.max_waiting = max(self.stats.max_waiting, len(self.waiting))
        return False

    def release(self, ticket: SlotTicket | None = None) -> None:
        if ticket is None or ticket.worker is None or self.running.get(ticket.worker) is not ticket:
            raise RuntimeError(f"{self.name}: release of a step that holds no slot here")
        worker = ticket.worker
        del self.running[worker]
        self.rule.finished(self, ticket, self._now() - ticket.started_s)
        if self.waiting:
            chosen = self.rule.choose(self, [w.ticket for w in self.waiting], worker, self._now())
            self._run(worker, self.waiting.pop(chosen))
        else:
            self.idle.append(worker)

    def withdraw(self, start: Callable[[], None]) -> None:
        for i, waiting in enumerate(self.waiting):
            if waiting.start is start:
                del self.waiting[i]
                return
        raise ValueError(f"{self.name}: the withdrawn step is not waiting")

    def _run(self, worker: int, waiting: _Waiting) -> None:
        ticket = waiting.ticket
        ticket.worker = worker
        ticket.started_s = self._now()
        self.running[worker] = ticket
        self.stats.started += 1
        self.stats.wait_total_s += ticket.started_s - ticket.ready_s
        self.rule.started(self, ticket)
        waiting.start()


class ReleaseRule(ABC):
    """Which waiting step a freed worker of a lane runs next."""

    name = "base"

    @abstractmethod
    def choose(
        self, lane: ExecutorLane, waiting: Sequence[SlotTicket], worker: int, now: float
    ) -> int:
        """Index into `waiting` (oldest first) of the step `worker` runs next."""

    def started(self, lane: ExecutorLane, ticket: SlotTicket) -> None:
        return None  # hooks do nothing unless a rule learns from them

    def finished(self, lane: ExecutorLane, ticket: SlotTicket, service_s: float) -> None:
        return None

    def episode_finished(self, flow_s: float) -> None:
        return None


class EagerRule(ReleaseRule):
    name = "eager"

    def choose(
        self, lane: ExecutorLane, waiting: Sequence[SlotTicket], worker: int, now: float
    ) -> int:
        return 0


class PrefixRule(ReleaseRule):
    """Steps whose prefix this executor served recently first (each lane models its server's
    LRU prefix cache of `cache_tokens`), oldest first; FIFO otherwise."""

    name = "prefix"

    def __init__(self, cache_tokens: int, max_bypass: int, cache_entries: int | None = None):
        self.cache_tokens = cache_tokens
        self.cache_entries = cache_entries
        self.max_bypass = max_bypass
        self.caches: dict[str, PrefixCache] = {}
        self.hits = 0
        self.misses = 0

    def _cache(self, lane: ExecutorLane) -> PrefixCache:
        cache = self.caches.get(lane.name)
        if cache is None:
            cache = self.caches[lane.name] = PrefixCache(self.cache_tokens, self.cache_entries)
        return cache

    def choose(
        self, lane: ExecutorLane, waiting: Sequence[SlotTicket], worker: int, now: float
    ) -> int:
        return next_step(waiting, self._cache(lane), "prefix", self.max_bypass)

    def started(self, lane: ExecutorLane, ticket: SlotTicket) -> None:
        if self._cache(lane).touch(ticket.prefix, approx_tokens(ticket.prefix)):
            self.hits += 1
        else:
            self.misses += 1


@dataclass(slots=True)
class _Ratio:
    """Running mean and variance (Welford) of observed / predicted service time, from a prior
    of 1 worth `count` observations with coefficient of variation `cv`."""

    count: float
    mean: float
    m2: float

    def add(self, x: float) -> None:
        self.count += 1.0
        delta = x - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (x - self.mean)

    @property
    def variance(self) -> float:
        return self.m2 / self.count


class TailRiskRule(ReleaseRule):
    """The mean-CVaR release index (`runtime.release.release_index`) on live requests.

    A waiting step s of episode e has projected flow time F_s = (now - arrival_e) + E[p_s] +
    D_s, where E[p_s] is its predicted latency times its executor's learnt ratio of observed to
    predicted service, and D_s the predicted chain behind it in its plan; its sd combines the
    ratio's spread on E[p_s] and `prior_cv` on D_s. The tail threshold is the beta-quantile of
    recent episodes' flow times, never below the `contender_beta` quantile of the contenders'
    projections (in a burst, at most a 1 - beta share can be in the tail)."""

    name = "tail_risk"

    def __init__(self, release: ReleaseParams):
        self.release = release
        self.ratios: dict[str, _Ratio] = {}
        self._recent: deque[float] = deque(maxlen=release.tail_memory)
        self.threshold = math.inf
        self._since = 0
        self._mean_weight = 1.0 - release.alpha_w
        self._tail_weight = release.kappa * release.alpha_w / (1.0 - release.beta)
        self._contender_beta = (
            release.beta if release.contender_beta is None else release.contender_beta
        )

    def _ratio(self, executor: str) -> _Ratio:
        ratio = self.ratios.get(executor)
        if ratio is None:
            n0 = self.release.prior_weight
            ratio = self.ratios[executor] = _Ratio(n0, 1.0, n0 * self.release.prior_cv**2)
        return ratio

    def service(self, lane: ExecutorLane, ticket: SlotTicket) -> tuple[float, float]:
        """Mean and sd of the step's service time on this lane's executor."""
        ratio = self._ratio(lane.name)
        return ticket.expected_s * ratio.mean, ticket.expected_s * math.sqrt(ratio.variance)

    def choose(
        self, lane: ExecutorLane, waiting: Sequence[SlotTicket], worker: int, now: float
    ) -> int:
        if len(waiting) == 1:
            return 0
        services = [self.service(lane, t) for t in waiting]
        projected = [
            now - t.arrival_s + mean + t.downstream_s
            for t, (mean, _) in zip(waiting, services, strict=True)
        ]
        threshold = max(self.threshold, quantile(projected, self._contender_beta))
        cv = self.release.prior_cv
        best, best_index = 0, -math.inf
        for k, ticket in enumerate(waiting):
            mean, sd = services[k]
            std = math.hypot(sd, cv * ticket.downstream_s)
            value = release_index(
                self._mean_weight, self._tail_weight, projected[k], std, threshold, mean
            )
            if value > best_index:  # ties: the oldest
                best, best_index = k, value
        return best

    def finished(self, lane: ExecutorLane, ticket: SlotTicket, service_s: float) -> None:
        if ticket.expected_s > 0:
            self._ratio(lane.name).add(service_s / ticket.expected_s)

    def episode_finished(self, flow_s: float) -> None:
        self._recent.append(flow_s)
        self._since += 1
        if self._since >= self.release.threshold_every or self.threshold == math.inf:
            self._since = 0
            self.threshold = quantile(self._recent, self.release.beta)


class CoActRule(ReleaseRule):
    """CoAct's contrastive online dispatch: the freed worker takes the waiting step most like
    its own recent path and least like the other workers' paths.

    Embeddings are computed only when there is a choice to make (more than one step waiting),
    in one batch for every text not embedded yet: a lane without contention costs nothing, and
    the encoder never runs once per step on the event loop."""

    name = "coact"

    def __init__(self, embed: Embed, contrast: float, path_length: int):
        self.embed = embed
        self.contrast = contrast
        self.path_length = path_length
        self._vectors: dict[str, np.ndarray] = {}
        self.paths: dict[tuple[str, int], deque[str]] = {}  # texts of each worker's recent steps

    def warm_up(self) -> None:
        """Load the encoder now, not at the first contention (loading takes seconds)."""
        self.embed(["warm up"])

    def _embed_missing(self, texts: Sequence[str]) -> None:
        missing = list(dict.fromkeys(t for t in texts if t not in self._vectors))
        if not missing:
            return
        if len(self._vectors) + len(missing) > 10_000:  # a long-running service: bound it
            self._vectors.clear()
            missing = list(dict.fromkeys(texts))
        for text, vector in zip(missing, self.embed(missing), strict=True):
            self._vectors[text] = np.asarray(vector, dtype=np.float32)

    def _path(self, lane: str, worker: int) -> np.ndarray | None:
        texts = self.paths.get((lane, worker))
        return None if not texts else np.mean([self._vectors[t] for t in texts], axis=0)

    def objective(self, lane: ExecutorLane, ticket: SlotTicket, worker: int) -> float:
        """-sim(step, own path) + contrast * mean sim(step, other workers' paths); the texts
        involved must have been embedded (`choose` does it)."""
        x = self._vectors[ticket.text]
        own = self._path(lane.name, worker)
        others = [
            p
            for w in range(lane.capacity)
            if w != worker and (p := self._path(lane.name, w)) is not None
        ]
        value = -float(x @ own) if own is not None else 0.0
        if others:
            value += self.contrast * float(np.mean([x @ p for p in others]))
        return value

    def choose(
        self, lane: ExecutorLane, waiting: Sequence[SlotTicket], worker: int, now: float
    ) -> int:
        if len(waiting) == 1:
            return 0
        texts = [t.text for t in waiting]
        for w in range(lane.capacity):
            texts.extend(self.paths.get((lane.name, w), ()))
        self._embed_missing(texts)
        values = [self.objective(lane, t, worker) for t in waiting]
        return min(range(len(values)), key=values.__getitem__)  # ties: the oldest

    def started(self, lane: ExecutorLane, ticket: SlotTicket) -> None:
        assert ticket.worker is not None
        path = self.paths.setdefault((lane.name, ticket.worker), deque(maxlen=self.path_length))
        path.append(ticket.text)


def _minilm(texts: list[str]) -> np.ndarray:
    from easy_core.executors.retrieve import encode_texts  # loads sentence-transformers

    return encode_texts(texts)


def make_rule(
    name: str, serve: ServeParams, release: ReleaseParams, embed: Embed | None = None
) -> ReleaseRule:
    if name == "eager":
        return EagerRule()
    if name == "tail_risk":
        return TailRiskRule(release)
    if name == "prefix":
        return PrefixRule(serve.prefix_cache_tokens, serve.max_bypass, serve.prefix_cache_entries)
    if name == "coact":
        return CoActRule(embed or _minilm, serve.coact_contrast, serve.coact_path)
    raise ConfigError(f"unknown release rule {name!r}; known: {', '.join(RULES)}")


class Dispatcher:
    """The lanes of one pool, shared by every episode that runs on it (a `SlotProvider`)."""

    def __init__(
        self, pool: ExecutorPool, rule: ReleaseRule, now: Callable[[], float] = time.monotonic
    ):
        """`now`: the clock of the event loop the episodes run on (asyncio's is monotonic)."""
        self.rule = rule
        self.lanes = {
            name: ExecutorLane(name, executor.profile.max_concurrency, rule, now)
            for name, executor in pool.executors.items()
        }
        self._ids = itertools.count(1)

    def slots(self, name: str) -> ExecutorLane:
        return self.lanes[name]

    def episode_id(self) -> int:
        return next(self._ids)

    def episode_finished(self, flow_s: float) -> None:
        self.rule.episode_finished(flow_s)

    def waiting(self) -> int:
        return sum(len(lane.waiting) for lane in self.lanes.values())

    def running(self) -> int:
        return sum(len(lane.running) for lane in self.lanes.values())
