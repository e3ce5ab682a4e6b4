"""Supervised warm-start data: the turns of a teacher policy's successful trajectories, as chat
examples (TRL's conversational format: {"messages": [...]})."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from easy_core.prompting import plan_text, render_messages
from easy_core.schemas import ExecutorProfile, Plan, Task, Trajectory


def teacher_examples(
    pairs: Iterable[tuple[Task, Trajectory]], profiles: list[ExecutorProfile]
) -> Iterator[dict]:
    """One example per turn of every correct trajectory: the messages before the turn, and the
    teacher's plan as the assistant's answer."""
    for task, trajectory in pairs:
        if not trajectory.correct:
            continue
        turns = [m.plan for m in trajectory.milestones]
        turns.append(Plan(milestone="answer", final_answer=trajectory.final_answer))
        for index, plan in enumerate(turns):
            messages = render_messages(task, profiles, trajectory.milestones[:index])
            messages.append({"role": "assistant", "content": plan_text(plan)})
            yield {"task_id": task.id, "turn": index, "messages": messages}
