"""A step that covers one declared subtask asks that subtask's own question.

A task with declared subtasks (a compound question's parts, a research chain's hops) already
holds each subtask's question, written by the suite or by the person who asked. An LLM
orchestrator that copies it into a step can lose it: the trained 135M checkpoint wrote one
part's problem into several steps, so its executors answered questions nobody asked. With
`orchestrator.ask_covered_questions` the `easy` policy's answer handling (`llm.record_answer`)
takes a covered subtask's question from the task instead of from the orchestrator's copy, and
the orchestrator decides what the plan is for: which subtasks become steps, on which executor,
after which others. It is not the runtime's: other policies write instructions a subtask's
question is not (`program` asks a model for a program).

Left as written: steps on tools (their instruction is a program, a query or a game command the
orchestrator composes), steps that cover several subtasks or none (their instruction says how
to answer them together, or what the step is), and subtasks without a question (the sim suite's,
whose executors read only the subtask's attributes).
"""

from __future__ import annotations

from collections.abc import Sequence

from easy_core.core.schemas import ExecutorProfile, Plan, Task


def is_tool(profile: ExecutorProfile) -> bool:
    """A tool, served live or replayed from its recording."""
    return (profile.recorded_backend or profile.backend) == "tool"


def has_questions(task: Task) -> bool:
    """Whether any of the task's subtasks holds its own question."""
    return any(sub.instruction for sub in task.subtasks)


def ask_covered_questions(plan: Plan, task: Task, profiles: Sequence[ExecutorProfile]) -> Plan:
    """`plan` with the instruction of each model step that covers one declared subtask replaced
    by that subtask's question. An unknown subtask or executor is left for plan validation to
    name."""
    tools = {profile.name for profile in profiles if is_tool(profile)}
    steps = []
    for step in plan.steps:
        covers = step.covers or []
        sub = task.subtask_index.get(covers[0]) if len(covers) == 1 else None
        if sub is not None and sub.instruction and step.executor not in tools:
            step = step.model_copy(update={"instruction": sub.instruction})
        steps.append(step)
    return plan.model_copy(update={"steps": steps})
