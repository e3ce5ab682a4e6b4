"""Release scheduling for many concurrent workflows that share limited executor capacity.

A per-workflow engine releases a step the moment its dependencies finish (`eager`): every ready
step joins its executor's FIFO queue. When many workflows arrive at once (Poisson arrivals) that
is step-level FIFO, and a workflow with a long chain pays the queue once per step, so the slowest
workflows become much slower than the median. This module is a discrete-event simulation of that
shared setting, and a `tail_risk` scheduler that decides

- which ready step to release next: the one whose workflow is most at risk in the tail, by a
  mean-CVaR objective on its remaining time, estimated online from observed step times; and
- how much released work to keep in flight per executor: an admission window tuned online from
  the idle time and the queueing time it causes.

The model (all in simulated seconds, deterministic for a seed, no sleeping):

- a workflow is one `sim` task; its steps are its subtasks along the task DAG, each on the
  executor the `greedy` baseline picks (the cheapest whose expected success clears
  `params.policies.greedy_threshold`); a step's service time is the latency the sim world gives
  it (a pure function of the seed, the task, the step and the executor, so every scheduler sees
  the same work);
- an executor has `round(max_concurrency * capacity_scale)` servers and a FIFO queue;
- a released step reaches its executor's queue `dispatch_s` later (request build and transport);
  this is why keeping some released work in flight pays: with nothing in flight a freed server
  sits idle for `dispatch_s`;
- workflows arrive as a Poisson process; `load` is the utilisation of the busiest executor
  (arrival rate times that executor's mean work per workflow over its servers), so that a load
  below 1 is stable for every executor.

`release_benchmark` compares P50 and P95 workflow flow time (finish minus arrival) of both
schedulers at light and heavy load; `release_markdown` renders its rows.

One concept in one module: the release schedulers and the online estimates they rank steps
by, which change together; the workload and its benchmark are in `benchmarks.release_bench`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from statistics import NormalDist

from easy_core.core.errors import ConfigError
from easy_core.core.params import ReleaseParams
from easy_core.core.schemas import ExecutorProfile
from easy_core.core.stats import quantile

_NORMAL = NormalDist()


# Mean subtask sizes of the sim generator (input 80-600, output 40-300 tokens, one dependency's
# output in context on average): the size at which a profile's latency model gives the prior.
TYPICAL_INPUT_TOKENS = 340 + 170


TYPICAL_OUTPUT_TOKENS = 170


@dataclass(frozen=True, slots=True)
class StepSpec:
    """One step of a workflow: a subtask on its executor, with its true service time (which
    schedulers never read; they see it only once the step has finished)."""

    sub_id: str
    skill: str
    executor: str
    service_s: float
    deps: tuple[int, ...]  # indexes into the workflow's steps
    succs: tuple[int, ...]
    tokens_in: int = TYPICAL_INPUT_TOKENS  # sizes the task text states, which schedulers may use
    tokens_out: int = TYPICAL_OUTPUT_TOKENS


@dataclass(frozen=True, slots=True)
class WorkflowSpec:
    task_id: str
    family: str
    steps: tuple[StepSpec, ...]  # topological order; the last one is the sink


@dataclass(slots=True, eq=False)
class ReleaseStep:
    """A step in one simulation run, with the times it went through."""

    workflow: int
    index: int
    spec: StepSpec
    waiting_deps: int
    ready_s: float = math.nan
    released_s: float = math.nan
    arrived_s: float = math.nan  # reached the executor's queue
    started_s: float = math.nan
    finished_s: float = math.nan

    @property
    def executor(self) -> str:
        return self.spec.executor


@dataclass(slots=True, eq=False)
class Workflow:
    index: int
    spec: WorkflowSpec
    arrival_s: float
    steps: list[ReleaseStep]
    done: int = 0
    finish_s: float = math.nan


@dataclass(slots=True, eq=False)
class ExecutorState:
    name: str
    servers: int
    busy: int = 0
    in_transit: int = 0
    queue: deque[ReleaseStep] = field(default_factory=deque)
    busy_s: float = 0.0
    max_busy: int = 0
    idle_marks: deque[float] = field(default_factory=deque)  # servers idle while work was held

    @property
    def outstanding(self) -> int:
        """Released work not finished: running, queued, or on its way."""
        return self.busy + len(self.queue) + self.in_transit


class ReleaseScheduler(ABC):
    """Holds ready steps and decides which to release to an executor, and when."""

    name = "base"

    @abstractmethod
    def ready(self, step: ReleaseStep, workflow: Workflow, now: float) -> None:
        """A step's dependencies have finished: it joins the held pool."""

    @abstractmethod
    def choose(self, executor: ExecutorState, now: float) -> ReleaseStep | None:
        """The step to release to `executor` now, or None to hold back."""

    @abstractmethod
    def held(self, executor: str) -> int:
        """Ready steps for `executor` not released yet."""

    def started(
        self, step: ReleaseStep, executor: ExecutorState, waited_s: float, starved_s: float
    ) -> None:
        """A released step started: it waited `waited_s` in the executor's queue, and the
        server that took it had sat idle `starved_s` while the scheduler held work back."""
        return None  # hooks do nothing unless a scheduler learns from them

    def finished(self, step: ReleaseStep, executor: ExecutorState, now: float) -> None:
        """A step finished after `step.spec.service_s` of service."""
        return None

    def workflow_finished(self, workflow: Workflow, now: float) -> None:
        """A workflow's last step finished."""
        return None


class EagerRelease(ReleaseScheduler):
    """Release every ready step at once, in the order it became ready: step-level FIFO."""

    name = "eager"

    def __init__(self) -> None:
        self._held: dict[str, deque[ReleaseStep]] = {}

    def ready(self, step: ReleaseStep, workflow: Workflow, now: float) -> None:
        self._held.setdefault(step.executor, deque()).append(step)

    def choose(self, executor: ExecutorState, now: float) -> ReleaseStep | None:
        held = self._held.get(executor.name)
        return held.popleft() if held else None

    def held(self, executor: str) -> int:
        return len(self._held.get(executor, ()))


@dataclass(slots=True)
class _Moments:
    """Running mean and variance (Welford), started from a prior worth `count`
    pseudo-observations, so that early estimates lean on the profile and later ones on data."""

    count: float
    mean: float
    m2: float
    observed: int = 0

    def add(self, x: float) -> None:
        self.count += 1.0
        delta = x - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (x - self.mean)
        self.observed += 1

    @property
    def variance(self) -> float:
        return self.m2 / self.count


class WorkEstimator:
    """Online estimate of step work (service seconds) per (executor, skill).

    The prior is the profile's latency model at the sim generator's typical step size
    (`ttft + tokens_in / prefill + tokens_out * verbosity / decode`), with standard deviation
    `prior_cv` times that, worth `prior_weight` observations; every finished step updates the
    running mean and variance of its (executor, skill).

    With `size_aware`, observations are first divided by the step's size factor (the latency
    model at the step's stated token sizes over the model at the typical size), so the running
    moments are of work per typical-size step, and a prediction multiplies them back by the
    step's factor: a 300-token answer is expected to take longer than a 40-token one on the same
    executor, while the level and spread still come from observation.
    """

    def __init__(
        self,
        profiles: Iterable[ExecutorProfile],
        prior_weight: float,
        prior_cv: float,
        size_aware: bool = True,
    ):
        self._profiles = {p.name: p for p in profiles}
        self._prior = {name: typical_latency_s(p) for name, p in self._profiles.items()}
        self.prior_weight = prior_weight
        self.prior_cv = prior_cv
        self.size_aware = size_aware
        self._stats: dict[tuple[str, str], _Moments] = {}

    def prior(self, executor: str) -> float:
        return self._prior[executor]

    def moments(self, executor: str, skill: str) -> _Moments:
        key = (executor, skill)
        stats = self._stats.get(key)
        if stats is None:
            mean = self._prior[executor]
            n0 = self.prior_weight
            stats = self._stats[key] = _Moments(n0, mean, n0 * (self.prior_cv * mean) ** 2)
        return stats

    def size_factor(self, spec: StepSpec) -> float:
        if not self.size_aware:
            return 1.0
        profile = self._profiles[spec.executor]
        return (
            typical_latency_s(profile, spec.tokens_in, spec.tokens_out) / self._prior[spec.executor]
        )

    def observe(self, spec: StepSpec, service_s: float) -> None:
        self.moments(spec.executor, spec.skill).add(service_s / self.size_factor(spec))

    def mean(self, spec: StepSpec) -> float:
        return self.moments(spec.executor, spec.skill).mean * self.size_factor(spec)

    def variance(self, spec: StepSpec) -> float:
        return self.moments(spec.executor, spec.skill).variance * self.size_factor(spec) ** 2


def typical_latency_s(
    profile: ExecutorProfile,
    tokens_in: int = TYPICAL_INPUT_TOKENS,
    tokens_out: int = TYPICAL_OUTPUT_TOKENS,
) -> float:
    """The profile's latency model for a step of the given sizes."""
    lat = profile.latency
    return (
        lat.ttft_s
        + tokens_in / lat.prefill_tokens_per_s
        + tokens_out * profile.verbosity / lat.tokens_per_s
    )


def normal_cvar(mean: float, std: float, beta: float) -> float:
    """CVaR_beta (mean of the worst 1-beta tail) of N(mean, std^2): mean + std * phi(z) / (1-beta)
    with z the beta-quantile of the standard normal. A sum of independent step times is close to
    normal once it has a few terms, and this keeps the objective a closed form."""
    z = _NORMAL.inv_cdf(beta)
    return mean + std * _NORMAL.pdf(z) / (1.0 - beta)


def release_index(
    mean_weight: float,
    tail_weight: float,
    projected: float,
    std: float,
    threshold: float,
    service_s: float,
) -> float:
    """c_s / E[p_s], the mean-CVaR release priority of a step (larger goes first): the marginal
    cost of delaying its workflow, `mean_weight` plus `tail_weight` times the probability that
    the workflow's projected flow time (normal, mean `projected`, sd `std`) passes the tail
    threshold, over the step's expected service time. The simulation (`TailRiskRelease`) and
    the service's dispatcher (`runtime.dispatcher`) rank steps by this one function."""
    cost = mean_weight
    if threshold < math.inf:
        if std > 0:
            tail = 1.0 - _NORMAL.cdf((threshold - projected) / std)
        else:
            tail = 1.0 if projected > threshold else 0.0
        cost += tail_weight * tail
    return cost / max(service_s, 1e-9)


class TailRiskRelease(ReleaseScheduler):
    """Mean-CVaR release: an index rule for which step goes next, and an adaptive window for how
    much released work to keep in flight.

    Which step. The objective is J = (1 - alpha_w) E[F] + alpha_w CVaR_beta[F] over workflow flow
    times F. Serving step s first on a server delays every other held step by s's service time,
    so (the c-mu rule) the best step to release maximises c_s / E[p_s]: the marginal cost of
    delaying its workflow per second, over its expected service time. For J that marginal cost is

        c_s = (1 - alpha_w) + alpha_w / (1 - beta) * P(F_s > q_beta)

    (the derivative of CVaR_beta[F] in F_w is P(F_w > VaR_beta) / (1 - beta)): the mean term
    counts every workflow alike, the CVaR term only those in the worst 1 - beta tail, all alike.
    F_s = age_w + R_s is the workflow's projected flow time through s; R_s is its remaining time
    along the longest remaining path through s, taken as normal with the summed means and
    variances of the online step-work estimates (`WorkEstimator`) plus, for the steps after s,
    the recent mean wait at their executors. The tail threshold q_beta (VaR) is the
    beta-quantile of recently finished workflows' flow times, but never below the
    `contender_beta` quantile of the contenders' projected flow times: at most a 1 - beta share
    of workflows can be in the worst 1 - beta, and without that bound a burst puts every
    contender in the "tail", they all weigh the same, and the longest steps starve. So a young
    workflow gets the shortest step first (mean flow time), one drifting into the tail overtakes
    the others (tail flow time), and a step off its workflow's critical path has a shorter R_s
    and a smaller tail probability. `kappa` scales the tail term. `risk` gives the objective's
    value on a step's remaining time, with the normal closed form of CVaR (`normal_cvar`).

    How much in flight. A release reaches its executor `dispatch_s` later, so releasing only onto
    free servers leaves each freed server idle for that long, while releasing everything (eager)
    gives up the order: work queued at the executor is FIFO. Each executor has a window W and
    takes releases while its outstanding work (running + queued + in transit) is below
    servers + floor(W). W starts at Little's law, servers * dispatch_s / mean service (steps the
    servers finish during one dispatch), and adapts on every step start from what the step
    waited for: if the server that takes it sat idle while this step was held back (W too
    small; idle capacity is the costly error at high load) W rises by 1; if released work is
    still waiting behind it in the executor's FIFO queue (W holds more than the servers need to
    cover a dispatch, and that surplus waits outside our control) W falls by `window_gain`. It
    settles at the smallest window that keeps servers fed, often 1 above the servers.
    """

    name = "tail_risk"

    def __init__(self, profiles: Iterable[ExecutorProfile], release: ReleaseParams):
        profiles = list(profiles)
        self.release = release
        self.estimator = WorkEstimator(
            profiles, release.prior_weight, release.prior_cv, release.size_aware
        )
        self._held: dict[str, list[tuple[ReleaseStep, float, float, float]]] = {}
        self.windows: dict[str, float] = {}
        # per executor: running mean of a step's ready-to-start time (held + queued)
        self.waits: dict[str, float] = {}
        self._recent: deque[float] = deque(maxlen=release.tail_memory)
        self._finished_since = 0
        self.threshold = math.inf  # q_beta: no tail known before any workflow finished
        mean_weight = 1.0 - release.alpha_w
        self._tail_weight = release.kappa * release.alpha_w / (1.0 - release.beta)
        self._mean_weight = mean_weight
        self._contender_beta = (
            release.beta if release.contender_beta is None else release.contender_beta
        )

    def _window(self, executor: ExecutorState) -> float:
        window = self.windows.get(executor.name)
        if window is None:
            init = self.release.window_init
            if init is None:
                mean = self.estimator.prior(executor.name)
                init = executor.servers * self.release.dispatch_s / mean
            window = self.windows[executor.name] = min(init, self.release.window_max)
        return window

    def remaining(self, step: ReleaseStep, workflow: Workflow) -> tuple[float, float]:
        """Mean and variance of the workflow's remaining time along its longest remaining path
        (by mean) through `step`, from the current estimates."""
        est = self.estimator
        specs = workflow.spec.steps
        path_mean: dict[int, float] = {}
        path_var: dict[int, float] = {}
        for i in range(len(specs) - 1, step.index - 1, -1):  # reverse topological order
            spec = specs[i]
            best_mean, best_var = 0.0, 0.0
            for j in spec.succs:
                if path_mean[j] > best_mean:
                    best_mean, best_var = path_mean[j], path_var[j]
            # the step being released waits no more; later ones queue like recent steps did
            wait = self.waits.get(spec.executor, 0.0) if i != step.index else 0.0
            path_mean[i] = best_mean + est.mean(spec) + wait
            path_var[i] = best_var + est.variance(spec)
        return path_mean[step.index], path_var[step.index]

    def risk(self, step: ReleaseStep, workflow: Workflow) -> float:
        """(1 - alpha_w) * mean + alpha_w * CVaR_beta of the remaining time through `step`."""
        mean, var = self.remaining(step, workflow)
        return (
            normal_cvar(mean, math.sqrt(var), self.release.beta) * self.release.alpha_w
            + (1.0 - self.release.alpha_w) * mean
        )

    def index(self, step: ReleaseStep, projected: float, std_r: float, threshold: float) -> float:
        """c_s / E[p_s]: the release priority of a held step (larger goes first), given its
        workflow's projected flow time through it and the tail threshold."""
        return release_index(
            self._mean_weight,
            self._tail_weight,
            projected,
            std_r,
            threshold,
            self.estimator.mean(step.spec),
        )

    def ready(self, step: ReleaseStep, workflow: Workflow, now: float) -> None:
        mean, var = self.remaining(step, workflow)
        held = self._held.setdefault(step.executor, [])
        held.append((step, workflow.arrival_s, mean, math.sqrt(var)))

    def choose(self, executor: ExecutorState, now: float) -> ReleaseStep | None:
        held = self._held.get(executor.name)
        if not held:
            return None
        if executor.outstanding >= executor.servers + math.floor(self._window(executor)):
            return None
        if len(held) == 1:
            return held.pop()[0]
        projected = [now - arrival + mean_r for _, arrival, mean_r, _ in held]
        # At most a 1 - beta share of workflows can be in the worst 1 - beta: in a burst, when
        # every contender is past the threshold of recent history, the tail is the top of the
        # contenders (else all would weigh the same, and the longest steps would starve).
        threshold = max(self.threshold, quantile(projected, self._contender_beta))
        best, best_index = 0, -math.inf
        for k, (step, _, _, std_r) in enumerate(held):
            value = self.index(step, projected[k], std_r, threshold)
            if value > best_index:  # ties: the earliest ready
                best, best_index = k, value
        return held.pop(best)[0]

    def held(self, executor: str) -> int:
        return len(self._held.get(executor, ()))

    def started(
        self, step: ReleaseStep, executor: ExecutorState, waited_s: float, starved_s: float
    ) -> None:
        wait = step.started_s - step.ready_s
        old = self.waits.get(executor.name)
        rate = self.release.wait_rate
        self.waits[executor.name] = wait if old is None else old + rate * (wait - old)
        window = self._window(executor)
        if starved_s > 0:
            window += 1.0
        elif executor.queue:
            window -= self.release.window_gain
        self.windows[executor.name] = min(max(window, 0.0), self.release.window_max)

    def finished(self, step: ReleaseStep, executor: ExecutorState, now: float) -> None:
        spec = step.spec
        self.estimator.observe(spec, spec.service_s)

    def workflow_finished(self, workflow: Workflow, now: float) -> None:
        self._recent.append(now - workflow.arrival_s)
        self._finished_since += 1
        if self._finished_since >= self.release.threshold_every or self.threshold == math.inf:
            self._finished_since = 0
            self.threshold = quantile(self._recent, self.release.beta)


def make_scheduler(
    name: str, profiles: Iterable[ExecutorProfile], release: ReleaseParams
) -> ReleaseScheduler:
    if name == "eager":
        return EagerRelease()
    if name == "tail_risk":
        return TailRiskRelease(profiles, release)
    raise ConfigError(f"unknown release scheduler {name!r}; known: {', '.join(SCHEDULERS)}")


SCHEDULERS = ("eager", "tail_risk")
