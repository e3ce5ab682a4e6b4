"""Pools drawn at random: valid, seeded, apart from the shipped pools, and the teacher's turns on
them name their own executors."""

from __future__ import annotations

import json
import random
from pathlib import Path

from easy_core.core.params import Params
from easy_core.executors.pool import load_pool_config
from easy_core.world.random_pools import random_pool
from easy_core.world.suites.sim import SKILLS


def test_drawn_pools_are_seeded_varied_and_named_apart_from_the_shipped_pools() -> None:
    shipped = {e.name for path in Path("configs/pools").glob("*.yaml")
               for e in load_pool_config(path).executors}  # fmt: skip
    pools = [random_pool(random.Random(seed)) for seed in range(40)]
    assert random_pool(random.Random(3)) == pools[3]
    assert len({p.model_dump_json() for p in pools}) == 40
    for pool in pools:
        names = [e.name for e in pool.executors]
        assert 4 <= len(names) <= 6 and not set(names) & shipped
        for executor in pool.executors:
            assert executor.backend == "sim" and set(executor.capability) == set(SKILLS)
    # the draws cover what sim-unseen has without copying it: tools, specialists, ladders
    kinds = {e.description for p in pools for e in p.executors}
    assert kinds == {"drawn generalist", "drawn specialist", "drawn tool"}
    for pool in pools:
        for tool in (e for e in pool.executors if e.description == "drawn tool"):
            rates = sorted(c.success for c in tool.capability.values())
            assert rates[-1] >= 0.95 and rates[-2] <= 0.06
        generalists = sorted(
            (e for e in pool.executors if e.description == "drawn generalist"),
            key=lambda e: e.price_in_per_1m,
        )
        # dearer generalists are slower: the trade-off the cards must show
        speeds = [e.latency.tokens_per_s for e in generalists]
        assert speeds[0] >= speeds[-1]


def test_teacher_turns_on_drawn_pools_show_and_name_the_drawn_executors() -> None:
    from easy_core.learning.teacher_data import teacher_dataset

    params = Params()
    params.sft_data.n_tasks = 4
    params.sft_data.real = []
    params.sft_data.random_pools = 3
    params.sft_data.random_pool_tasks = 4
    examples, summary = teacher_dataset(params)
    drawn = summary["suites"]["sim-random"]
    assert drawn["pools"] == ["sim-random-0", "sim-random-1", "sim-random-2"]
    assert (
        drawn["tasks"] == 12
        and 0 < drawn["examples"] == len(examples) - (summary["suites"]["sim"]["examples"])
    )
    default = {e.name for e in load_pool_config("configs/pools/sim-default.yaml").executors}
    on_drawn = examples[summary["suites"]["sim"]["examples"] :]
    cards_seen = set()
    for example in on_drawn:
        cards = example["messages"][0]["content"]
        shown = {line.split(" ")[1] for line in cards.splitlines() if line.startswith("- ")}
        assert not shown & default
        cards_seen.add(frozenset(shown))
        plan = json.loads(example["messages"][-1]["content"])
        assert {step["executor"] for step in plan["steps"]} <= shown
    assert len(cards_seen) > 1  # more than one drawn pool made it into the data
    # drawn tasks are not the training pool's tasks
    sim_ids = {e["task_id"] for e in examples[: len(examples) - len(on_drawn)]}
    assert not sim_ids & {e["task_id"] for e in on_drawn}
