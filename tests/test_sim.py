from __future__ import annotations

from collections import Counter

import pytest

from easy_core.core.params import SimParams
from easy_core.core.schemas import Plan, Step, StepRequest
from easy_core.evaluation.evaluator import EvalSpec, evaluate
from easy_core.executors.pool import load_pool
from easy_core.runtime.episode import EpisodeRunner
from easy_core.world.sim_world import SimWorld
from easy_core.world.suites.sim import FAMILIES, SimSuite, generate_task
from tests.conftest import SIM_DEFAULT, run


def test_generator_is_seeded_and_splits_are_disjoint():
    a = [t.model_dump() for t in SimSuite().tasks("test", 20, seed=3)]
    b = [t.model_dump() for t in SimSuite().tasks("test", 20, seed=3)]
    train = [t.model_dump() for t in SimSuite().tasks("train", 20, seed=3)]
    assert a == b
    assert {t["prompt"] for t in a}.isdisjoint({t["prompt"] for t in train})
    assert a != [t.model_dump() for t in SimSuite().tasks("test", 20, seed=4)]


def test_every_family_appears_and_every_task_has_one_sink():
    tasks = list(SimSuite().tasks("test", 40, seed=0))
    assert set(Counter(t.family for t in tasks)) == set(FAMILIES)
    for task in tasks:
        ids = [s.id for s in task.subtasks]
        needed = {d for s in task.subtasks for d in s.depends_on}
        assert [i for i in ids if i not in needed] == [task.sink.id]
        for position, sub in enumerate(task.subtasks):  # topological order
            assert all(ids.index(d) < position for d in sub.depends_on)
        assert task.answer == task.sink.gold
        assert all(sub.id in task.prompt for sub in task.subtasks)
    fanout = [t for t in tasks if t.family == "fanout"]
    assert max(len(t.subtasks) for t in fanout) >= 6


def _step_result(world, pool, task, executor, inputs=(), covers=None, seed=0):
    request = StepRequest(
        step_id="s",
        instruction="go",
        task=task,
        covers=tuple(covers or (task.subtasks[0].id,)),
        inputs=tuple(inputs),
        seed=seed,
    )
    return world.simulate(pool.profile(executor), request)


def test_simulator_is_deterministic_in_seed_task_step_executor(pool, params):
    world = SimWorld(params.sim, params.capability)
    task = generate_task(0, "test", 7)
    first = _step_result(world, pool, task, "sim-m")
    again = _step_result(world, pool, task, "sim-m")
    assert first == again
    outcomes = {
        (seed, name): _step_result(world, pool, task, name, seed=seed).model_dump_json()
        for seed in range(5)
        for name in ("sim-xs", "sim-xl")
    }
    assert len(set(outcomes.values())) > 2


def test_success_rate_follows_the_profile(pool, params):
    world = SimWorld(params.sim, params.capability)
    tasks = list(SimSuite().tasks("train", 400, seed=1))
    rates = {}
    for name in ("sim-xs", "sim-m", "sim-xl"):
        results = [_step_result(world, pool, t, name, seed=1) for t in tasks]
        rates[name] = sum(
            r.sub_answers[t.subtasks[0].id] == t.subtasks[0].gold
            for r, t in zip(results, tasks, strict=True)
        ) / len(tasks)
        expected = sum(
            world.success_probability(pool.profile(name), t.subtasks[0]) for t in tasks
        ) / len(tasks)
        assert rates[name] == pytest.approx(expected, abs=0.08)
    assert rates["sim-xs"] < rates["sim-m"] < rates["sim-xl"]


def test_missing_prerequisite_context_loses_quality(pool, params):
    runner = EpisodeRunner(pool, params, SimSuite.check)
    tasks = [t for t in SimSuite().tasks("test", 300, seed=2) if t.family == "chain"]

    class OneShot:
        name = "one-shot"

        def __init__(self, with_edges: bool):
            self.with_edges = with_edges

        async def act(self, state):
            if state.milestones:
                sink = state.task.sink.id
                result = next(r for r in state.milestones[0].results if sink in r.covers)
                return Plan(final_answer=result.sub_answers.get(sink, ""))
            return Plan(
                steps=[
                    Step(
                        id=s.id,
                        executor="sim-xl",
                        instruction="solve",
                        covers=[s.id],
                        depends_on=list(s.depends_on) if self.with_edges else [],
                    )
                    for s in state.task.subtasks
                ]
            )

    def success(policy):
        return sum(run(runner.run(t, policy)).correct for t in tasks) / len(tasks)

    assert success(OneShot(True)) > success(OneShot(False)) + 0.3


def test_context_beyond_the_window_is_lost(pool, params):
    world = SimWorld(params.sim, params.capability)
    task = generate_task(0, "test", 1)  # fanout: t1 -> many -> sink
    tool = pool.profile("sim-tool")  # 4096-token window
    upstream = [
        _step_result(world, pool, task, "sim-xl", covers=[s.id]).model_copy(
            update={"tokens_out": 2500}
        )
        for s in task.subtasks[1:-1]
    ]
    request = StepRequest(
        step_id="sink",
        instruction="merge",
        task=task,
        covers=(task.sink.id,),
        inputs=tuple(upstream),
    )
    result = world.simulate(tool, request)
    offered = sum(r.tokens_out for r in upstream)
    assert offered > tool.context_window
    assert result.tokens_in <= tool.context_window
    # only one upstream result fits: the sink's other prerequisites count as missing
    assert result.tokens_in - 2500 < task.sink.input_tokens + 10


def test_same_seed_same_numbers_and_wall_mode_agrees(params):
    spec = EvalSpec("sim", "greedy", SIM_DEFAULT, n=30, seed=5)
    first, a = evaluate(spec, params)
    second, b = evaluate(spec, params)
    assert first == second
    assert [t.model_dump() for t in a] == [t.model_dump() for t in b]


@pytest.mark.wall
def test_wall_time_mode_sleeps_the_modelled_latency(params):
    fast = SimParams(latency_jitter=0.0)
    pool = load_pool(SIM_DEFAULT, params.model_copy(update={"sim": fast}))
    runner = EpisodeRunner(pool, params, SimSuite.check)
    task = generate_task(0, "test", 0)

    class Tiny:
        name = "tiny"

        async def act(self, state):
            if state.milestones:
                return Plan(final_answer="x")
            return Plan(
                steps=[
                    Step(
                        id="a", executor="sim-tool", instruction="go", covers=[task.subtasks[0].id]
                    )
                ]
            )

    virtual = run(runner.run(task, Tiny()), "virtual")
    wall = run(runner.run(task, Tiny()), "wall")
    assert virtual.milestones[0].results[0].latency_s == wall.milestones[0].results[0].latency_s
    assert wall.metrics.makespan_s == pytest.approx(virtual.metrics.makespan_s, abs=0.05)
    assert wall.metrics.makespan_s >= virtual.metrics.makespan_s


def test_every_suite_has_three_disjoint_splits():
    from easy_core.core.errors import ConfigError
    from easy_core.world.suites.research import ResearchSuite
    from easy_core.world.suites.splits import SPLITS, list_split

    for suite in (SimSuite(), ResearchSuite()):
        prompts = {split: {t.prompt for t in suite.tasks(split, 30, seed=1)} for split in SPLITS}
        assert all(t.split == "validation" for t in suite.tasks("validation", 3, seed=1))
        if suite.name == "sim":  # generated: disjoint streams
            assert not prompts["train"] & prompts["validation"]
            assert not prompts["validation"] & prompts["test"]
        with pytest.raises(ConfigError, match="train, validation, test"):
            next(iter(suite.tasks("dev", 1, seed=1)))
    items = list(range(100))
    parts = {split: list_split(items, "k", 0.8, split) for split in SPLITS}
    assert sorted(sum(parts.values(), [])) == items  # a partition
    assert [len(parts[s]) for s in SPLITS] == [64, 16, 20]
    assert parts["test"] == list_split(items, "k", 0.8, "test")
    # the test part is what it was before validation existed: the last 20% of the shuffle
    import random

    shuffled = list(items)
    random.Random("k").shuffle(shuffled)
    assert parts["test"] == shuffled[80:]
