"""`orchestrator.ask_covered_questions`: a model step that covers one declared subtask is asked
that subtask's own question, whatever copy of it the orchestrator wrote."""

from __future__ import annotations

import asyncio

from easy_core.core.params import Params
from easy_core.core.schemas import Plan, Step
from easy_core.executors.pool import ExecutorPool
from easy_core.plans.prompting import plan_text
from easy_core.runtime.episode import EpisodeRunner
from easy_core.world.suites.compound_math import COMBINE, CompoundMathSuite
from tests.helpers import ScriptedExecutor, WrittenAnswers


def _asked(params: Params, ask: bool) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """What the model and the python tool were asked, step by step, for one compound task whose
    plan copies the wrong part into its first step."""
    suite = CompoundMathSuite()
    task = next(iter(suite.tasks("test", 1, 0)))
    first, second, third = task.subtasks[:3]
    combine = task.subtasks[-1]
    model = ScriptedExecutor("model", latency=0.0)
    model.profile = model.profile.model_copy(update={"backend": "openai"})
    tool = ScriptedExecutor("python", latency=0.0)
    pool = ExecutorPool.of("asked", [model, tool])
    plan = Plan(
        milestone="parts",
        steps=[
            Step(id="s1", executor="model", covers=[first.id], instruction=second.instruction),
            Step(id="s2", executor="python", covers=[second.id], instruction="print(6 * 7)"),
            Step(
                id="s3", executor="model", covers=[third.id, *[s.id for s in task.subtasks[3:-1]]],
                instruction="Solve the remaining parts.",
            ),
            Step(
                id="s4", executor="model", covers=[combine.id], depends_on=["s1", "s2", "s3"],
                instruction="Join {s1}, {s2} and {s3}.",
            ),
        ],
    )  # fmt: skip
    answer = Plan(milestone="answer", final_answer="{s4}")
    settings = params.orchestrator.model_copy(update={"ask_covered_questions": ask})
    runner = EpisodeRunner(pool, params.model_copy(update={"orchestrator": settings}), suite.check)
    asyncio.run(runner.run(task, WrittenAnswers([plan_text(plan), plan_text(answer)])))
    questions = [first.instruction, second.instruction, COMBINE]
    return (
        {c.step_id: c.instruction for c in model.calls},
        {c.step_id: c.instruction for c in tool.calls},
        questions,
    )


def test_a_model_step_is_asked_its_subtasks_question_not_the_orchestrators_copy(
    params: Params,
) -> None:
    model, tool, (first, second, combine) = _asked(params, ask=True)
    assert model["s1"] == first  # the plan had copied the second part's question here
    assert model["s4"] == combine  # its inputs still reach it as data (render_step)
    assert model["s3"] == "Solve the remaining parts."  # several subtasks: as written
    assert tool == {"s2": "print(6 * 7)"}  # a tool's instruction is a program: as written

    model, tool, _ = _asked(params, ask=False)
    assert model["s1"] == second and model["s4"].startswith("Join out-s1, out-s2")
    assert tool == {"s2": "print(6 * 7)"}
