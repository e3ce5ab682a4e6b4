"""The shared dispatcher: each release rule's choice, the lanes' capacity across episodes, and
episodes that share it getting the same outcomes as episodes that run alone."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from easy_core.core.params import Params, ReleaseParams, ServeParams
from easy_core.executors.pool import SlotTicket, load_pool
from easy_core.policies.baselines import BASELINES
from easy_core.policies.batch import run_episodes
from easy_core.runtime.dispatcher import (
    CoActRule,
    Dispatcher,
    EagerRule,
    ExecutorLane,
    PrefixRule,
    TailRiskRule,
    make_rule,
)
from easy_core.runtime.episode import EpisodeRunner
from easy_core.world.suites.sim import SimSuite, generate_task
from tests.conftest import SIM_DEFAULT, run


def ticket(episode: int, text: str = "", **kw: float | str) -> SlotTicket:
    fields = {"arrival_s": 0.0, "prefix": f"task {episode}", "expected_s": 1.0, **kw}
    return SlotTicket(episode=episode, text=text, **fields)  # type: ignore[arg-type]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def lane_with(rule, capacity: int = 1) -> tuple[ExecutorLane, Clock, list[int]]:  # noqa: ANN001
    clock = Clock()
    return ExecutorLane("x", capacity, rule, clock), clock, []


def fill(lane: ExecutorLane, started: list[int], tickets: list[SlotTicket]) -> None:
    for t in tickets:
        lane.acquire(lambda t=t: started.append(t.episode), t)


def drain(lane: ExecutorLane, clock: Clock, started: list[int]) -> list[int]:
    """Finish running steps one at a time until nothing waits; the start order."""
    while lane.running:
        clock.now += 1.0
        lane.release(next(iter(lane.running.values())))
    return started


def test_eager_is_fifo_across_episodes_and_holds_capacity() -> None:
    lane, clock, started = lane_with(EagerRule(), capacity=2)
    fill(lane, started, [ticket(e) for e in (3, 1, 4, 1, 5)])
    assert started == [3, 1] and len(lane.waiting) == 3 and not lane.idle
    assert drain(lane, clock, started) == [3, 1, 4, 1, 5]
    assert lane.idle and not lane.running and lane.stats.started == 5


def test_a_shared_lane_refuses_steps_without_tickets_and_unknown_releases() -> None:
    lane, _, _ = lane_with(EagerRule())
    with pytest.raises(TypeError, match="SlotTicket"):
        lane.acquire(lambda: None)
    with pytest.raises(RuntimeError, match="holds no slot"):
        lane.release(ticket(1))


def test_withdraw_removes_a_waiting_step() -> None:
    lane, clock, started = lane_with(EagerRule())
    first, second = ticket(1), ticket(2)
    fill(lane, started, [first])
    go = lambda: started.append(2)  # noqa: E731
    lane.acquire(go, second)
    lane.withdraw(go)
    assert drain(lane, clock, started) == [1]


def test_prefix_serves_a_cached_prefix_first_then_fifo_with_a_bypass_limit() -> None:
    rule = PrefixRule(cache_tokens=4000, max_bypass=2)
    lane, clock, started = lane_with(rule)
    # episode 7 runs first, so its prefix is cached; of the waiting, 7's steps jump the queue
    fill(lane, started, [ticket(7), ticket(1), ticket(7), ticket(2), ticket(7)])
    assert drain(lane, clock, started)[:3] == [7, 7, 7]
    assert rule.hits == 2 and rule.misses >= 1
    # the bypass limit: a step passed over twice goes next whatever its prefix
    rule = PrefixRule(cache_tokens=4000, max_bypass=1)
    lane, clock, started = lane_with(rule)
    fill(lane, started, [ticket(7), ticket(1), ticket(7), ticket(7)])
    assert drain(lane, clock, started) == [7, 7, 1, 7]


def test_tail_risk_before_any_tail_is_shortest_service_first() -> None:
    rule = TailRiskRule(ReleaseParams())
    lane, clock, started = lane_with(rule)
    fill(
        lane,
        started,
        [ticket(0), ticket(1, expected_s=5.0), ticket(2, expected_s=0.5), ticket(3)],
    )
    assert drain(lane, clock, started) == [0, 2, 3, 1]


def test_tail_risk_lets_an_episode_in_the_tail_overtake() -> None:
    rule = TailRiskRule(ReleaseParams(threshold_every=1))
    for flow in (5.0, 6.0, 7.0, 8.0, 9.0):  # recent episodes: the tail begins near 8 s
        rule.episode_finished(flow)
    assert 5.0 < rule.threshold < 9.0
    lane, clock, started = lane_with(rule)
    clock.now = 20.0
    young = [ticket(e, arrival_s=19.5, expected_s=1.0) for e in (1, 2, 3)]
    # an old request with a long chain still behind its step, whose step is a bit longer
    old = ticket(9, arrival_s=4.0, expected_s=1.5, downstream_s=6.0)
    fill(lane, started, [ticket(0, arrival_s=20.0), *young, old])
    assert drain(lane, clock, started)[:2] == [0, 9]


def test_tail_risk_learns_an_executor_slower_than_its_profile() -> None:
    rule = TailRiskRule(ReleaseParams(prior_weight=1.0))
    lane, clock, started = lane_with(rule)
    for _ in range(20):
        t = ticket(1, expected_s=1.0)
        lane.acquire(lambda: None, t)
        clock.now += 3.0  # every step takes three times its prediction
        lane.release(t)
    mean, _ = rule.service(lane, ticket(2, expected_s=2.0))
    assert mean == pytest.approx(6.0, rel=0.15)


def one_hot(texts: list[str]) -> np.ndarray:
    """A toy embedding: the topic word of each text."""
    topics = ["math", "poem", "code"]
    return np.array([[float(t.startswith(topic)) for topic in topics] for t in texts])


def test_coact_sends_a_step_to_the_worker_whose_path_it_resembles() -> None:
    rule = CoActRule(one_hot, contrast=1.0, path_length=4)
    lane, clock, started = lane_with(rule, capacity=2)
    math_step, poem_step = ticket(1, "math: 2+2"), ticket(2, "poem: the sea")
    fill(lane, started, [math_step, poem_step])  # worker 1 runs math, worker 0 poems (a stack)
    assert {math_step.worker, poem_step.worker} == {0, 1}
    fill(lane, started, [ticket(3, "poem: a tree"), ticket(4, "math: 3*3")])
    clock.now = 1.0
    lane.release(math_step)  # the math worker frees: it takes the math step, not the older poem
    assert started[-1] == 4
    lane.release(poem_step)
    assert started[-1] == 3


def test_coact_with_the_packaged_minilm_prefers_the_related_step() -> None:
    rule = make_rule("coact", ServeParams(), ReleaseParams())
    lane, clock, started = lane_with(rule, capacity=2)
    a = ticket(1, "Compute the sum of 17 and 25.")
    b = ticket(2, "Write a short poem about autumn leaves.")
    fill(lane, started, [a, b])
    fill(
        lane,
        started,
        [ticket(3, "Write a haiku about falling leaves."), ticket(4, "What is 12 plus 30?")],
    )
    clock.now = 1.0
    lane.release(a)
    assert started[-1] == 4


@pytest.mark.wall
@pytest.mark.parametrize("rule_name", ["eager", "tail_risk", "prefix", "coact"])
def test_episodes_on_one_dispatcher_match_episodes_alone(params: Params, rule_name: str) -> None:
    """Twelve episodes at once on one shared dispatcher (wall time, the world 50x faster): each
    ends with the answer it gets alone, and no lane ever runs more than its capacity."""
    fast = params.model_copy(update={"sim": params.sim.model_copy(update={"time_scale": 0.02})})
    pool = load_pool(SIM_DEFAULT, fast)
    runner = EpisodeRunner(pool, fast, SimSuite.check)
    tasks = [generate_task(0, "test", i) for i in range(12)]
    alone = run_episodes(tasks, runner, "greedy", 0)
    dispatcher = Dispatcher(pool, make_rule(rule_name, fast.serve, fast.release))
    peak = dict.fromkeys(pool.executors, 0)
    for name, lane in dispatcher.lanes.items():
        original = lane._run

        def counting(worker, waiting, lane=lane, name=name, original=original):  # noqa: ANN001, ANN202
            original(worker, waiting)
            peak[name] = max(peak[name], len(lane.running))

        lane._run = counting  # type: ignore[method-assign]

    async def together() -> list:
        policy = BASELINES["greedy"]()
        return await asyncio.gather(
            *(
                runner.run(t, policy, 0, session=pool.session(t.budget_usd, shared=dispatcher))
                for t in tasks
            )
        )

    shared = run(together(), "wall")
    assert [t.final_answer for t in shared] == [t.final_answer for t in alone]
    assert [t.task_id for t in shared] == [t.id for t in tasks]
    for name, executor in pool.executors.items():
        assert peak[name] <= executor.profile.max_concurrency
    assert sum(lane.stats.started for lane in dispatcher.lanes.values()) == sum(
        t.metrics.n_steps for t in shared
    )
