"""Executor levels (`orchestrator.executor_levels`, issue 27's lever): a step names the expected
success it needs, the runtime turns it into the cheapest executor whose card meets it, and
teacher data writes each chosen executor as the level that selects it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from easy_core.benchmarks.level_table_bench import load_table, save_table, tune_level_table
from easy_core.core.clock import DiscreteEventClock, run_synchronously
from easy_core.core.errors import ConfigError, UnknownExecutorError
from easy_core.core.params import Params
from easy_core.core.schemas import Plan
from easy_core.executors.pool import load_pool
from easy_core.plans.prompting import LEVELS, plan_text
from easy_core.policies.baselines import greedy_executor
from easy_core.policies.batch import run_episodes
from easy_core.policies.levels import (
    LevelTablePolicy,
    level_cell,
    level_choice,
    plan_in_levels,
    step_options,
)
from easy_core.policies.llm import record_answer
from easy_core.runtime.episode import EpisodeRunner
from easy_core.world.suites.sim import SimSuite
from tests.conftest import SIM_DEFAULT
from tests.helpers import WrittenAnswers

SIM_UNSEEN = str(Path(SIM_DEFAULT).with_name("sim-unseen.yaml"))


def _levels(params: Params) -> Params:
    on = params.orchestrator.model_copy(update={"executor_levels": True})
    return params.model_copy(update={"orchestrator": on})


def _first_plans(params: Params, pool_path: str, n: int, split: str = "validation", seed: int = 3):
    pool = load_pool(pool_path, params)
    tasks = list(SimSuite(params.sim).tasks(split, n, seed))
    runner = EpisodeRunner(pool, params, SimSuite.check)
    trajectories = run_episodes(tasks, runner, "greedy", 0)
    return pool, tasks, [t.milestones[0].plan for t in trajectories]


def test_greedys_choices_are_levels_that_select_them_again(params: Params) -> None:
    """Every executor greedy chose (the cheapest that clears its threshold) has a level that
    selects it; read back on the same pool, each level gives greedy's executor, and the levels
    vary with the subtask (greedy's threshold is one level, but the highest one selecting an
    executor depends on what is above it)."""
    slope = params.capability.difficulty_slope
    pool, tasks, plans = _first_plans(params, SIM_UNSEEN, 12)
    written: set[str] = set()
    for task, plan in zip(tasks, plans, strict=True):
        levelled, unmatched = plan_in_levels(plan, task, pool.profiles, slope)
        assert unmatched == 0
        written |= {step.executor for step in levelled.steps}
        assert all(step.executor in LEVELS for step in levelled.steps)
        runner = EpisodeRunner(pool, _levels(params), SimSuite.check)
        cursor = runner.start(task, 0, DiscreteEventClock())
        run_synchronously(cursor.turn(WrittenAnswers([plan_text(levelled)])))
        played = cursor.trajectory("easy").milestones[0].plan
        assert [s.executor for s in played.steps] == [s.executor for s in plan.steps]
    assert len(written) > 1


def test_met_labels_select_the_same_executor_and_ask_no_more_than_its_card(
    params: Params,
) -> None:
    """`level_label="met"` writes the highest threshold the chosen executor's expected success
    meets: read back on the same pool it selects the same executor, its threshold is never above
    that executor's success (only "best" may be, where no threshold is met), it is never above
    the "highest" label, and on some steps it is below it."""
    slope = params.capability.difficulty_slope
    pool, tasks, plans = _first_plans(params, SIM_UNSEEN, 12)
    order = list(LEVELS)
    lower = 0
    for task, plan in zip(tasks, plans, strict=True):
        met, unmatched = plan_in_levels(plan, task, pool.profiles, slope, "met")
        highest, _ = plan_in_levels(plan, task, pool.profiles, slope)
        assert unmatched == 0
        for chosen, step_met, step_high in zip(plan.steps, met.steps, highest.steps, strict=True):
            options = {o.executor: o for o in step_options(task, chosen, pool.profiles, slope)}
            picked = level_choice(sorted(options.values()), step_met.executor)
            assert picked.executor == chosen.executor
            success = options[chosen.executor].success
            if step_met.executor != "best":
                assert LEVELS[step_met.executor] <= success
            for above in order[order.index(step_met.executor) + 1 :]:  # none higher is met
                selects = level_choice(sorted(options.values()), above).executor == chosen.executor
                assert not (selects and LEVELS[above] <= success)
            assert order.index(step_met.executor) <= order.index(step_high.executor)
            lower += step_met.executor != step_high.executor
    assert lower > 0


def test_a_level_means_the_same_on_every_pool(params: Params) -> None:
    """One level plan runs on two pools under their own names: each step on the cheapest
    executor whose card clears the level there (">=95%" is greedy's rule on both pools)."""
    _, tasks, plans = _first_plans(params, SIM_DEFAULT, 4)
    threshold = params.policies.greedy_threshold
    level = next(name for name, value in LEVELS.items() if value == threshold)
    for pool_path in (SIM_DEFAULT, SIM_UNSEEN):
        pool = load_pool(pool_path, params)
        runner = EpisodeRunner(pool, _levels(params), SimSuite.check)
        for task, plan in zip(tasks, plans, strict=True):
            steps = [s.model_copy(update={"executor": level}) for s in plan.steps]
            cursor = runner.start(task, 0, DiscreteEventClock())
            text = plan_text(plan.model_copy(update={"steps": steps}))
            run_synchronously(cursor.turn(WrittenAnswers([text])))
            played = cursor.trajectory("easy").milestones[0].plan
            for step in played.steps:
                sub = task.subtask(step.covers[0])
                assert step.executor == greedy_executor(task, sub, pool.profiles, params)


def test_a_name_where_a_level_belongs_is_a_typed_error_the_model_can_repair(
    params: Params,
) -> None:
    pool, tasks, plans = _first_plans(params, SIM_DEFAULT, 1)
    runner = EpisodeRunner(pool, _levels(params), SimSuite.check)
    cursor = runner.start(tasks[0], 0, DiscreteEventClock())
    assert run_synchronously(cursor.turn(WrittenAnswers([plan_text(plans[0])])))
    assert "is not a level" in (cursor.state.repair_error or "")
    with pytest.raises(UnknownExecutorError, match="orchestrator.executor_levels"):
        record_answer(cursor.state, plan_text(plans[0]), 10)
    answer = Plan(milestone="answer", final_answer="42")
    assert isinstance(record_answer(cursor.state, plan_text(answer), 10), Plan)


def test_levels_on_a_task_without_subtasks_is_a_config_error_not_an_invalid_plan(
    params: Params,
) -> None:
    """A real suite's task declares no subtasks to read a level on: every answer would end
    invalid and count against the model, so the run stops with the setting to change."""
    pool, tasks, plans = _first_plans(params, SIM_DEFAULT, 1)
    bare = tasks[0].model_copy(update={"subtasks": []})
    runner = EpisodeRunner(pool, _levels(params), SimSuite.check)
    cursor = runner.start(bare, 0, DiscreteEventClock())
    with pytest.raises(ConfigError, match="declares no subtasks"):
        record_answer(cursor.state, plan_text(plans[0]), 10)


def test_teacher_data_in_levels_says_so_and_writes_no_name(params: Params, tmp_path: Path) -> None:
    """The teacher's turns written in levels: the prompt states the level rule, every
    executor slot of an answer holds a level, and the summary (which SFT's checkpoint contract
    copies) records the contract and the steps no level could select."""
    from easy_core.learning.teacher_data import write_teacher_dataset

    data = params.sft_data.model_copy(update={"n_tasks": 6, "real": []})
    settings = _levels(params).model_copy(update={"sft_data": data})
    summary = write_teacher_dataset(settings, tmp_path / "sft")
    assert summary["executor_levels"] is True
    assert summary["suites"]["sim"]["steps_no_level_selects"] >= 0
    rows = [json.loads(line) for line in (tmp_path / "sft" / "train.jsonl").open()]
    assert rows and all('">=80%" runs it' in row["messages"][0]["content"] for row in rows)
    executors = [
        step["executor"]
        for row in rows
        for step in json.loads(row["messages"][-1]["content"])["steps"]
    ]
    assert executors and set(executors) <= set(LEVELS)


def test_plan_validity_reads_levels_as_the_runtime_does(params: Params) -> None:
    """A level counts as valid only where the runtime can read it: on the one subtask its step
    covers. A step covering two subtasks passes the names check and fails here."""
    from easy_core.evaluation.plan_validity import valid_plan_rate
    from tests.fake_openai import FakeOpenAI

    pool, [task], [plan] = _first_plans(params, SIM_DEFAULT, 1, split="test", seed=0)
    levelled, _ = plan_in_levels(plan, task, pool.profiles, params.capability.difficulty_slope)
    first = levelled.steps[0]
    two = first.model_copy(update={"covers": [s.id for s in task.subtasks[:2]]})
    widened = levelled.model_copy(update={"steps": [two, *levelled.steps[1:]]})
    levels = _levels(params)
    reports = []
    for plan in (levelled, widened):
        with FakeOpenAI(reply=plan_text(plan)) as server:
            remote = levels.orchestrator.model_copy(
                update={"backend": "openai", "endpoint": server.url, "model": "orch"}
            )
            reports.append(
                valid_plan_rate(levels.model_copy(update={"orchestrator": remote}), SIM_DEFAULT, 1)
            )
    assert reports[0]["valid"] == 1
    assert reports[1]["valid"] == 0
    assert reports[1]["errors"] == {f"step {first.id}": 1}


def test_a_level_table_of_greedys_level_is_greedy_and_tuning_never_loses_to_it(
    params: Params, tmp_path: Path
) -> None:
    """`LevelTablePolicy` with greedy's level in every cell plays greedy's episodes; one cell
    moved changes the run; a table tuned on validation scores at least greedy there (it starts
    from greedy's table), and it survives a round trip through its file."""
    pool = load_pool(SIM_UNSEEN, params)
    tasks = list(SimSuite(params.sim).tasks("validation", 12, 0))
    runner = EpisodeRunner(pool, params, SimSuite.check)
    cells = {level_cell(task, sub) for task in tasks for sub in task.subtasks}

    def rewards(policy) -> list[float]:  # noqa: ANN001
        return [t.reward.total for t in run_episodes(tasks, runner, policy, 0)]

    greedy = rewards("greedy")
    assert rewards(LevelTablePolicy(dict.fromkeys(cells, ">=95%"))) == greedy
    assert rewards(LevelTablePolicy(dict.fromkeys(cells, "cheapest"))) != greedy

    table = tune_level_table(params, [Path(SIM_UNSEEN)], 12, sweeps=1)
    assert set(table) == cells and set(table.values()) <= set(LEVELS)
    tuned = sum(rewards(LevelTablePolicy(table)))
    assert tuned >= sum(greedy)
    save_table(table, tmp_path / "table.json")
    assert load_table(tmp_path / "table.json") == table
    # split by sink: greedy's level on both sides is greedy; `cheapest` on the sinks only is
    # neither greedy nor `cheapest` everywhere, and the split survives the file
    by_sink = {level_cell(task, sub, True) for task in tasks for sub in task.subtasks}
    assert {cell[2] for cell in by_sink} == {True, False}
    assert rewards(LevelTablePolicy(dict.fromkeys(by_sink, ">=95%"))) == greedy
    sinks_cheap = {cell: "cheapest" if cell[2] else ">=95%" for cell in by_sink}
    cheap_sinks = rewards(LevelTablePolicy(sinks_cheap))
    assert cheap_sinks not in (greedy, rewards(LevelTablePolicy(dict.fromkeys(cells, "cheapest"))))
    save_table(sinks_cheap, tmp_path / "sinks.json")
    assert load_table(tmp_path / "sinks.json") == sinks_cheap
    with pytest.raises(ConfigError, match="not a level"):
        LevelTablePolicy({("code", 1, None): ">=99%"})
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="is not a level table"):
        load_table(tmp_path / "bad.json")
