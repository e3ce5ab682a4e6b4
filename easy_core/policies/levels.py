"""Executor levels (`orchestrator.executor_levels`): the orchestrator writes, in a step's executor
slot, the expected success the step needs (`prompting.LEVELS`), and the step runs on the
cheapest executor whose card meets it on the subtask the step covers, as the `greedy` baseline
chooses with its one fixed threshold (`baselines.cheapest_capable`). The orchestrator still
decides per step how much reliability to buy; the cards turn that into a name, so the same
answer means the same thing on a pool the model has never seen.

`plan_in_levels` goes the other way for teacher data: each executor a teacher chose becomes the
level that selects it on that pool."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from easy_core.core.errors import ConfigError, UnknownExecutorError, UnknownSubtaskError
from easy_core.core.schemas import ExecutorProfile, Plan, Step, Subtask, Task
from easy_core.plans.prompting import LEVELS
from easy_core.policies.baselines import (
    GreedyPolicy,
    Option,
    cheapest_capable,
    estimates,
    subtask_options,
)
from easy_core.runtime.policy import EpisodeState

LevelLabel = Literal["highest", "met"]


def level_choice(options: list[Option], level: str) -> Option:
    """The option `level` selects among one subtask's options (sorted cheapest first)."""
    return cheapest_capable(options, LEVELS[level])


def step_options(
    task: Task, step: Step, profiles: Sequence[ExecutorProfile], slope: float
) -> list[Option]:
    """The options of the subtask `step` covers; a level needs exactly one to be read."""
    sub = task.subtask_index.get(step.covers[0]) if step.covers and len(step.covers) == 1 else None
    if sub is None:
        raise UnknownSubtaskError(
            f"step {step.id}: an executor level is read on the one subtask of the task a step "
            f"covers, and it covers {step.covers or 'none'}; name one of the task's subtasks"
        )
    options, undeclared = subtask_options(task, sub, profiles, slope)
    return options or undeclared


def resolve_levels(
    plan: Plan, task: Task, profiles: Sequence[ExecutorProfile], slope: float
) -> Plan:
    """`plan` with each step's level replaced by the executor it selects among `profiles`."""
    if not task.subtasks:  # not the model's fault: every answer would end invalid
        raise ConfigError(
            f"task {task.id} declares no subtasks, and orchestrator.executor_levels reads a "
            "step's level on the subtask it covers: run a levels checkpoint on the sim suite, or "
            "a names checkpoint (executor_levels false) here"
        )
    steps = []
    for step in plan.steps:
        if step.executor not in LEVELS:
            raise UnknownExecutorError(
                f"step {step.id}: executor {step.executor!r} is not a level; with "
                f"orchestrator.executor_levels write one of {', '.join(LEVELS)}"
            )
        options = step_options(task, step, profiles, slope)
        chosen = level_choice(options, step.executor).executor
        steps.append(step.model_copy(update={"executor": chosen}))
    return plan.model_copy(update={"steps": steps})


def executor_level(
    options: list[Option], executor: str, label: LevelLabel = "highest"
) -> tuple[str, bool]:
    """The level that selects `executor` among `options`, and whether one does. Of the levels
    that select it, `label` picks:
    - "highest": the most a step could ask of it (for the most likely executor, "best");
    - "met": the highest threshold its expected success meets, the reliability the choice
      bought ("best" only where it meets none), so the label keeps its meaning on a pool where
      a cheaper executor also meets that threshold.
    When none selects it (a teacher's choice that is neither the cheapest above any threshold
    nor the most likely), the level whose choice is closest to it in expected success."""
    chosen = {level: level_choice(options, level) for level in LEVELS}
    exact = [level for level, option in chosen.items() if option.executor == executor]
    if exact:
        if label == "met":
            met = [level for level in exact if LEVELS[level] <= chosen[level].success]
            return (met or exact)[-1], True
        return exact[-1], True
    wanted = next((o.success for o in options if o.executor == executor), 0.0)
    closest = min(chosen, key=lambda level: (abs(chosen[level].success - wanted), LEVELS[level]))
    return closest, False


def plan_in_levels(
    plan: Plan,
    task: Task,
    profiles: Sequence[ExecutorProfile],
    slope: float,
    label: LevelLabel = "highest",
) -> tuple[Plan, int]:
    """`plan` with each executor replaced by its level on `profiles`, and how many steps had no
    level that selects their executor (`executor_level`)."""
    steps, unmatched = [], 0
    for step in plan.steps:
        options = step_options(task, step, profiles, slope)
        level, exact = executor_level(options, step.executor, label)
        unmatched += not exact
        steps.append(step.model_copy(update={"executor": level}))
    return plan.model_copy(update={"steps": steps}), unmatched


# skill, difficulty, and whether no other subtask needs the subtask's result (None: either)
LevelCell = tuple[str, int, bool | None]
LevelTable = dict[LevelCell, str]


def level_cell(task: Task, sub: Subtask, by_sink: bool = False) -> LevelCell:
    """The table cell of `sub`: its skill and difficulty, and with `by_sink` whether it is a
    sink of the task's DAG (a failed sink is retried alone; a failure above it reruns what
    depends on it)."""
    sink = not any(sub.id in other.depends_on for other in task.subtasks) if by_sink else None
    return sub.skill, sub.difficulty, sink


class LevelTablePolicy(GreedyPolicy):
    """`greedy` with a level per (skill, difficulty), optionally per sink or not, in place of
    its one threshold: each subtask runs on the cheapest executor whose card meets its cell's
    level (a cell the table leaves out uses greedy's threshold), and doubted subtasks are
    retried as greedy retries them. The strongest rule a step-level choice of levels can be
    without reading the task any further: the reference a levels checkpoint is measured
    against (`easy bench level-table`)."""

    name = "level-table"

    def __init__(self, table: LevelTable):
        unknown = sorted({level for level in table.values() if level not in LEVELS})
        if unknown:
            raise ConfigError(
                f"level table: {', '.join(unknown)} is not a level; use one of {', '.join(LEVELS)}"
            )
        self.table = table
        self.by_sink = any(cell[2] is not None for cell in table)

    def choose(self, state: EpisodeState, sub: Subtask) -> str:
        level = self.table.get(level_cell(state.task, sub, self.by_sink))
        threshold = LEVELS[level] if level else state.params.policies.greedy_threshold
        return cheapest_capable(estimates(state).options[sub.id], threshold).executor
