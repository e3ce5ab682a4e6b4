"""Supervised warm-start data: the turns of a teacher policy's successful trajectories, as chat
examples (TRL's conversational format: {"messages": [...]})."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from easy_core.evaluation import load_pool, run_episodes
from easy_core.executors.pool import ExecutorPool, load_pool_config
from easy_core.params import Params
from easy_core.prompting import plan_text, render_messages
from easy_core.runtime.episode import EpisodeRunner
from easy_core.schemas import ExecutorProfile, Plan, Task, Trajectory
from easy_core.suites import get_suite


def teacher_examples(
    pairs: Iterable[tuple[Task, Trajectory]], profiles: list[ExecutorProfile]
) -> Iterator[dict]:
    """One example per turn of every correct trajectory: the messages before the turn, and the
    teacher's plan as the assistant's answer."""
    for task, trajectory in pairs:
        if not trajectory.correct:
            continue
        turns = [m.plan for m in trajectory.milestones]
        turns.append(Plan(milestone="answer", final_answer=_cited_answer(task, trajectory)))
        if task.suite != "sim":  # real tasks do not show their subtask ids: plans cannot cite them
            turns = [_without_covers(plan) for plan in turns]
        for index, plan in enumerate(turns):
            messages = render_messages(task, profiles, trajectory.milestones[:index])
            messages.append({"role": "assistant", "content": plan_text(plan)})
            yield {"task_id": task.id, "turn": index, "messages": messages}


def _cited_answer(task: Task, trajectory: Trajectory) -> str | None:
    """The teacher's answer as the orchestrator is asked to write it on a task with subtasks:
    a citation of the newest step that produced it (`{m1-t6}`), not the copied string."""
    if not task.subtasks:
        return trajectory.final_answer
    for milestone in reversed(trajectory.milestones):
        for result in milestone.results:
            if result.sub_answers.get(task.sink.id) == trajectory.final_answer:
                return f"{{{result.step_id}}}"
    return trajectory.final_answer


def _without_covers(plan: Plan) -> Plan:
    steps = [step.model_copy(update={"covers": None}) for step in plan.steps]
    return plan.model_copy(update={"steps": steps})


def teacher_dataset(params: Params) -> tuple[list[dict], dict]:
    """The teacher's successful turns on the sim suite's training split and on each real
    suite of `sft_data.real`, and a summary per suite."""
    from easy_core.calibration import sim_replay

    config = params.sft_data
    sources: list[tuple[str, int, ExecutorPool]] = [
        ("sim", config.n_tasks, load_pool(config.pool, params))
    ]
    for real in config.real:
        if real.executors == "replay":
            pool = ExecutorPool.from_config(sim_replay(load_pool_config(real.pool)))
        else:
            pool = load_pool(real.pool, params)
        sources.append((real.suite, real.n_tasks, pool))
    examples: list[dict] = []
    summary: dict = {"teacher": config.teacher, "suites": {}}
    for name, n_tasks, pool in sources:
        suite = get_suite(name, params)
        tasks = list(suite.tasks("train", n_tasks, config.seed))
        runner = EpisodeRunner(pool, params, suite.check)
        trajectories = run_episodes(tasks, runner, config.teacher, config.seed)
        rows = list(teacher_examples(zip(tasks, trajectories, strict=True), pool.profiles))
        examples += rows
        summary["suites"][name] = {
            "pool": pool.name,
            "tasks": len(tasks),
            "successful_trajectories": sum(t.correct for t in trajectories),
            "examples": len(rows),
        }
    summary["examples"] = len(examples)
    return examples, summary
