"""The compound math suite: 3 to 6 reasoning-gym problems of mixed generators per task, solved
as parallel subtasks and combined by a final step; checked per part and whole."""

from __future__ import annotations

import pytest

from easy_core.core.errors import ConfigError
from easy_core.core.params import Params
from easy_core.core.schemas import DomainCapability, StepRequest, StepResult, Task
from easy_core.executors.pool import ExecutorPool
from easy_core.policies.batch import run_episodes
from easy_core.runtime.episode import EpisodeRunner
from easy_core.world.suites import get_suite
from easy_core.world.suites.compound_math import (
    MAX_PARTS,
    MIN_PARTS,
    CompoundMathSuite,
    question_parts,
)
from easy_core.world.suites.math import MathSuite
from tests.helpers import ScriptedExecutor


def test_tasks_mix_generators_and_splits_share_nothing(params: Params) -> None:
    suite = get_suite("math-compound", params)
    tasks = list(suite.tasks("test", 12, 0))
    sizes = {len(t.subtasks) - 1 for t in tasks}
    assert sizes <= set(range(MIN_PARTS, MAX_PARTS + 1)) and len(sizes) > 1
    for task in tasks:
        *parts, combine = task.subtasks
        assert len({name for name, _ in task.metadata["parts"]}) >= 2
        assert combine.depends_on == [p.id for p in parts] and not any(p.depends_on for p in parts)
        assert task.sink is combine
    prompts = {t.prompt for t in suite.tasks("train", 12, 0)}
    assert not prompts & {t.prompt for t in tasks}
    assert [t.prompt for t in suite.tasks("test", 3, 0, start=2)] == [t.prompt for t in tasks[2:5]]
    single = {t.prompt for t in MathSuite().tasks("test", 50, 0)}
    assert not {s.instruction for t in tasks for s in t.subtasks} & single


def test_checked_per_part_and_whole() -> None:
    task = next(CompoundMathSuite().tasks("test", 1, 0))
    golds = [sub.gold for sub in task.subtasks[:-1]]
    suite = CompoundMathSuite
    assert suite.check(task, "Working.\nAnswer: " + "; ".join(golds))
    wrong = [*golds[:-1], golds[-1] + "9"]
    assert not suite.check(task, "Answer: " + "; ".join(wrong))
    score = suite.score(task, "Answer: " + "; ".join(wrong))
    assert score["parts"] == (len(golds) - 1) / len(golds) and score["all"] == 0
    assert not suite.check(task, "Answer: " + "; ".join(golds[:-1]))  # a part left out
    first = task.subtasks[0]
    assert suite.check_subtask(task, first, f"so\nAnswer: {first.gold}")
    assert not suite.check_subtask(task, first, f"Answer: {golds[1]}9")
    assert suite.check_subtask(task, task.sink, "Answer: " + "; ".join(golds))


class Solver(ScriptedExecutor):
    """Answers every part right; the combining step joins its inputs' answers."""

    async def run(self, request: StepRequest) -> StepResult:
        result = await super().run(request)
        [sub_id] = request.covers
        sub = request.task.subtask(sub_id)
        if sub.depends_on:
            parts = [r.output.removeprefix("Answer: ") for r in request.inputs]
            output = "Answer: " + "; ".join(parts)
        else:
            output = f"Answer: {sub.gold}"
        return result.model_copy(update={"output": output, "covers": list(request.covers)})


def test_a_plan_runs_the_parts_in_parallel_then_combines(params: Params) -> None:
    suite = CompoundMathSuite()
    tasks = list(suite.tasks("test", 3, 0))
    solver = Solver("solver", latency=0.1)
    solver.profile.capability = {
        "math": DomainCapability(success=0.9),
        "writing": DomainCapability(success=0.9),
    }
    pool = ExecutorPool.of("solver", [solver])
    trajectories = run_episodes(tasks, EpisodeRunner(pool, params, suite.check), "strongest", 0)
    for task, trajectory in zip(tasks, trajectories, strict=True):
        assert trajectory.correct, trajectory.end_detail
        # the parts ran at once (0.1 s each), then the combining step: 0.2 s, not 0.1 (k + 1)
        assert trajectory.metrics.makespan_s < 0.25 < 0.1 * len(task.subtasks)


def test_a_persons_compound_question_becomes_parts_and_a_combining_step() -> None:
    marked = "Part 1: What is 12 * 34? Part 2: How many legs do 3 dogs have?\npart 3: 7 - 9?"
    assert question_parts(marked) == [
        "What is 12 * 34?",
        "How many legs do 3 dogs have?",
        "7 - 9?",
    ]
    assert question_parts("What is 2 + 2?\n\nWhat is 3 * 3?") == [
        "What is 2 + 2?",
        "What is 3 * 3?",
    ]
    task = CompoundMathSuite().from_question(marked)
    *parts, combine = task.subtasks
    assert [p.skill for p in parts] == ["math"] * 3 and "12 * 34" in parts[0].instruction
    assert combine.depends_on == ["t1", "t2", "t3"] and task.answer == ""
    assert CompoundMathSuite.score(task, "Answer: 408; 12; -2") == {}  # no gold to score
    assert CompoundMathSuite.check(task, "Answer: 408; 12; -2") is False
    with pytest.raises(ConfigError, match="2 to 6 parts"):
        CompoundMathSuite().from_question("What is 2 + 2?")


def test_a_task_as_asked_is_parsed_back_into_the_same_parts() -> None:
    suite = CompoundMathSuite()
    for task in suite.tasks("test", 5, 0):
        again = suite.from_question(suite.question_of(task))

        def words(t: Task) -> list[str]:  # a person's parts come stripped of edge whitespace
            return [" ".join(s.instruction.split()) for s in t.subtasks[:-1]]

        assert words(again) == words(task)
