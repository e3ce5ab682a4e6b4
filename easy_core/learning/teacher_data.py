"""Supervised warm-start data: the turns of a teacher policy's trajectories, as chat
examples (TRL's conversational format: {"messages": [...]})."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from easy_core.core.errors import ConfigError
from easy_core.core.params import Params
from easy_core.core.schemas import ExecutorProfile, Plan, Task, Trajectory
from easy_core.core.storage import atomic_write_text, write_json
from easy_core.executors.pool import ExecutorPool, load_pool, load_pool_config, load_pool_context
from easy_core.plans.prompting import plan_text, render_messages
from easy_core.policies.batch import run_episodes
from easy_core.policies.levels import LevelLabel, plan_in_levels
from easy_core.runtime.episode import EpisodeRunner
from easy_core.world.random_pools import fresh_names, random_pool
from easy_core.world.suites import get_suite


def teacher_examples(
    pairs: Iterable[tuple[Task, Trajectory]],
    profiles: list[ExecutorProfile],
    executor_last: bool = False,
    estimates_slope: float | None = None,
    levels_slope: float | None = None,
    level_label: LevelLabel = "highest",
    hints_slope: float | None = None,
    correct_only: bool = True,
    first_turn: bool = True,
) -> Iterator[dict]:
    """One example per turn of every trajectory (with `correct_only`, every correct one): the
    messages before the turn (with per-subtask estimates when `estimates_slope` is set, and
    escalation hints in the history when `hints_slope` is), and the teacher's plan as the
    assistant's answer, both in the output contract `executor_last` names; with `levels_slope`
    (the capability model's difficulty slope) each executor is written as the level that selects
    it, picked by `level_label` (`levels.executor_level`; `level_unmatched` counts the steps no
    level selects). Without `first_turn`, the first turn of each trajectory is left out."""
    for task, trajectory in pairs:
        if correct_only and not trajectory.correct:
            continue
        turns = [m.plan for m in trajectory.milestones]
        turns.append(Plan(milestone="answer", final_answer=_cited_answer(task, trajectory)))
        if task.suite != "sim":  # real tasks do not show their subtask ids: plans cannot cite them
            turns = [_without_covers(plan) for plan in turns]
        for index, plan in enumerate(turns):
            if index == 0 and not first_turn:
                continue
            messages = render_messages(
                task,
                profiles,
                trajectory.milestones[:index],
                executor_last=executor_last,
                estimates_slope=estimates_slope,
                executor_levels=levels_slope is not None,
                hints_slope=hints_slope,
            )
            unmatched = 0
            if levels_slope is not None:
                plan, unmatched = plan_in_levels(plan, task, profiles, levels_slope, level_label)
            messages.append({"role": "assistant", "content": plan_text(plan, executor_last)})
            example = {"task_id": task.id, "turn": index, "messages": messages}
            yield example | ({"level_unmatched": unmatched} if levels_slope is not None else {})


def under_fresh_names(
    profiles: list[ExecutorProfile], trajectory: Trajectory, rng: random.Random
) -> tuple[list[ExecutorProfile], Trajectory]:
    """The pool's cards under `fresh_names`, in shuffled order, and the trajectory with every
    executor it names (plans, results, errors) renamed to match."""
    shown = dict(zip((p.name for p in profiles), fresh_names(rng, len(profiles)), strict=True))
    cards = [profile.model_copy(update={"name": shown[profile.name]}) for profile in profiles]
    rng.shuffle(cards)

    longest_first = sorted(shown, key=len, reverse=True)
    pattern = re.compile("|".join(re.escape(name) for name in longest_first))

    def rename(text: str | None) -> str | None:
        return pattern.sub(lambda found: shown[found.group(0)], text) if text else text

    milestones = []
    for milestone in trajectory.milestones:
        steps = [s.model_copy(update={"executor": shown.get(s.executor, s.executor)})
                 for s in milestone.plan.steps]  # fmt: skip
        results = [r.model_copy(update={"executor": shown.get(r.executor, r.executor),
                                        "error": rename(r.error)})
                   for r in milestone.results]  # fmt: skip
        plan = milestone.plan.model_copy(update={"steps": steps})
        milestones.append(milestone.model_copy(update={"plan": plan, "results": results}))
    return cards, trajectory.model_copy(update={"milestones": milestones})


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
    """The teacher's turns (of its correct trajectories, or of all: `sft_data.trajectories`) on
    the sim suite's training split, on pools drawn at random (`sft_data.random_pools`, each
    with its own training tasks) and on each real suite of `sft_data.real`, and a summary per
    source."""
    from easy_core.executors.pool import sim_replay

    config = params.sft_data
    if params.orchestrator.executor_levels and config.real:
        raise ConfigError(
            "orchestrator.executor_levels reads a step's level on the subtask it covers, and the "
            "real suites declare none: set sft_data.real to [] or executor_levels to false"
        )
    # (summary key: the drawn pools share one, suite, tasks, task seed, pool)
    sources: list[tuple[str, str, int, int, ExecutorPool]] = [
        ("sim", "sim", config.n_tasks, config.seed, load_pool(config.pool, params))
    ]
    for index in range(config.random_pools):
        drawn = random_pool(random.Random(f"sft/{config.seed}/{index}"), f"sim-random-{index}")
        pool = ExecutorPool.from_config(drawn, load_pool_context(params))
        # seeds apart from the sim source's: other tasks than the ones on the training pool
        seed = config.seed + 1 + index
        sources.append(("sim-random", "sim", config.random_pool_tasks, seed, pool))
    for real in config.real:
        if real.executors == "replay":
            pool = ExecutorPool.from_config(sim_replay(load_pool_config(real.pool)))
        else:
            pool = load_pool(real.pool, params)
        sources.append((real.suite, real.suite, real.n_tasks, config.seed, pool))
    examples: list[dict] = []
    executor_last, estimates_slope = params.orchestrator.executor_last, params.estimates_slope()
    levels_slope = (
        params.capability.difficulty_slope if params.orchestrator.executor_levels else None
    )
    summary: dict = {
        "teacher": config.teacher,
        "trajectories": config.trajectories,
        "turns": config.turns,
        **params.orchestrator.contract(),
        "suites": {},
    }
    if levels_slope is not None:
        summary["level_label"] = config.level_label
    for key, name, n_tasks, seed, pool in sources:
        suite = get_suite(name, params)
        tasks = list(suite.tasks("train", n_tasks, seed))
        runner = EpisodeRunner(pool, params, suite.check)
        trajectories = run_episodes(tasks, runner, config.teacher, seed)
        rows = []
        for task, trajectory in zip(tasks, trajectories, strict=True):
            profiles = pool.profiles
            if config.fresh_names and name == "sim":
                rng = random.Random(f"sft/{config.seed}/names/{pool.name}/{task.id}")
                profiles, trajectory = under_fresh_names(profiles, trajectory, rng)
            rows += teacher_examples(
                [(task, trajectory)],
                profiles,
                executor_last,
                estimates_slope,
                levels_slope,
                config.level_label,
                params.hints_slope(),
                correct_only=config.trajectories == "correct",
                first_turn=config.turns == "all",
            )
        examples += rows
        entry = summary["suites"].setdefault(
            key, {"pools": [], "tasks": 0, "successful_trajectories": 0, "examples": 0}
        )
        entry["pools"].append(pool.name)
        entry["tasks"] += len(tasks)
        entry["successful_trajectories"] += sum(t.correct for t in trajectories)
        entry["examples"] += len(rows)
        if levels_slope is not None:
            unmatched = sum(row["level_unmatched"] for row in rows)
            entry["steps_no_level_selects"] = entry.get("steps_no_level_selects", 0) + unmatched
    summary["examples"] = len(examples)
    return examples, summary


def write_teacher_dataset(params: Params, out_dir: str | Path) -> dict:
    """teacher_dataset written atomically: `train.jsonl` and `summary.json` in `out_dir`."""
    examples, summary = teacher_dataset(params)
    atomic_write_text(
        Path(out_dir) / "train.jsonl", "".join(json.dumps(e) + "\n" for e in examples)
    )
    write_json(Path(out_dir) / "summary.json", summary)
    return summary
