"""What an LLM orchestrator reads and writes: the executor cards, the task, the milestone history
(each result compressed to fit), and the JSON output contract (docs/ARCHITECTURE.md,
"Contracts")."""

from __future__ import annotations

import json

from easy_core.core.capability import expected_success
from easy_core.core.params import Params
from easy_core.core.schemas import ExecutorProfile, Milestone, Plan, Task

# A step's keys in the order the orchestrator writes them. Executor last: the model has written
# which subtask the step covers and what it asks before it chooses who runs it (a decoder sees
# only what it has written). A checkpoint speaks the order it was trained on
# (`orchestrator.executor_last`, recorded in the checkpoint: hf_models.CONTRACT_FILE).
STEP_KEYS = ("id", "executor", "instruction", "depends_on", "covers")
EXECUTOR_LAST_KEYS = ("id", "covers", "instruction", "depends_on", "executor")

_EXAMPLE_STEP = {
    "id": "s1", "executor": "NAME", "instruction": "...", "depends_on": [], "covers": ["t1"]
}  # fmt: skip
CONTRACT_RULES = (
    "Steps without a dependency path between them run in parallel. Write {s1} in an "
    "instruction to insert the result of step s1 (which must be in depends_on); a step may "
    "depend on steps of earlier milestones. Results marked `check: doubtful` are likely wrong. "
    'When you know the answer, reply {"milestone": "answer", "steps": [], '
    '"final_answer": "..."}, or "{s1}" to answer with the result of step s1. '
    "Prefer the cheapest executor that will succeed."
)
MAX_OUTPUT_CHARS = 200

# `orchestrator.executor_levels`: a step names the expected success it needs instead of an
# executor, and the runtime runs it on the cheapest executor whose card meets that
# (`policies/levels.py`). The choice is then the same words on every pool: a model that cannot
# copy an unseen name from the cards can still say how sure a step must be. Thresholds in [0, 1];
# "best" is above any estimate, so it falls through to the most likely executor.
LEVELS: dict[str, float] = {
    "cheapest": 0.0,
    ">=50%": 0.50,
    ">=60%": 0.60,
    ">=70%": 0.70,
    ">=80%": 0.80,
    ">=85%": 0.85,
    ">=90%": 0.90,
    ">=95%": 0.95,
    "best": 1.01,
}
LEVEL_RULE = (
    'A step\'s "executor" is the expected success it needs: ">=80%" runs it on the cheapest '
    'executor whose card gives the step\'s skill at least 80% at its difficulty, "best" on the '
    'most likely to succeed, "cheapest" on the cheapest. One of: ' + ", ".join(LEVELS) + "."
)


def step_keys(executor_last: bool = False) -> tuple[str, ...]:
    return EXECUTOR_LAST_KEYS if executor_last else STEP_KEYS


def contract(executor_last: bool = False, executor_levels: bool = False) -> str:
    """The system prompt's output contract, its example step in the order the model writes
    (with `executor_levels`, a level in the executor slot and the rule that reads it)."""
    step = _EXAMPLE_STEP | ({"executor": ">=80%"} if executor_levels else {})
    example = {
        "milestone": "short goal of this stage",
        "steps": [{key: step[key] for key in step_keys(executor_last)}],
        "final_answer": None,
    }
    rules = f"{CONTRACT_RULES} {LEVEL_RULE}" if executor_levels else CONTRACT_RULES
    return (
        "You orchestrate a pool of executors. Each turn, answer with exactly one JSON object:\n"
        f"{json.dumps(example)}\n{rules}"
    )


def executor_cards(profiles: list[ExecutorProfile]) -> str:
    return "\n".join(f"- {profile.card()}" for profile in profiles)


def subtask_estimates(task: Task, profiles: list[ExecutorProfile], slope: float) -> str:
    """One line per subtask: every executor's expected success on it (the cards' rate for its
    skill, moved to its difficulty), cheapest executor first."""
    by_price = sorted(profiles, key=lambda p: (p.price_in_per_1m + p.price_out_per_1m, p.name))
    lines = []
    for sub in task.subtasks:
        estimates = (
            f"{p.name} {expected_success(p, sub.skill, sub.difficulty, slope):.0%}"
            for p in by_price
        )
        lines.append(f"{sub.id}: {', '.join(estimates)}")
    return "\n".join(lines)


def stronger_untried(
    task: Task, profiles: list[ExecutorProfile], milestones: list[Milestone], slope: float
) -> dict[tuple[int, str], bool]:
    """For each doubtful result of one covered subtask in `milestones`, keyed (milestone
    index, step id): whether the cards name an executor more likely to succeed on that subtask
    than every executor tried on it up to that milestone (what `greedy` escalates to)."""
    tried: dict[str, list[str]] = {}
    stronger = {}
    for milestone in milestones:
        for step in milestone.plan.steps:
            for sub_id in step.covers or ():
                tried.setdefault(sub_id, []).append(step.executor)
        for result in milestone.results:
            if result.self_check is not False or len(result.covers) != 1:
                continue  # the history says nothing more of a result not doubted
            sub = task.subtask_index.get(result.covers[0])
            if sub is None:
                continue
            rates = {p.name: expected_success(p, sub.skill, sub.difficulty, slope)
                     for p in profiles if sub.skill in p.capability}  # fmt: skip
            floor = max((rates.get(name, 0.0) for name in tried.get(sub.id, ())), default=0.0)
            stronger[(milestone.index, result.step_id)] = any(
                rate > floor + 1e-9 for rate in rates.values()
            )
    return stronger


def render_history(
    milestones: list[Milestone],
    max_chars: int = MAX_OUTPUT_CHARS,
    stronger: dict[tuple[int, str], bool] | None = None,
) -> str:
    """The milestones' results, one line each; with `stronger` (`stronger_untried`) a doubtful
    result also says whether a more reliable executor is left to retry it on."""
    if not milestones:
        return "No milestone has run yet."
    lines = []
    for milestone in milestones:
        lines.append(f"Milestone {milestone.index + 1}: {milestone.plan.milestone}")
        for result in milestone.results:
            output = (
                result.output
                if len(result.output) <= max_chars
                else result.output[:max_chars] + "..."
            )
            check = {True: "ok", False: "doubtful", None: "-"}[result.self_check]
            if stronger is not None and result.self_check is False:
                left = stronger.get((milestone.index, result.step_id))
                if left is not None:
                    check += ", stronger executor left" if left else ", none stronger left"
            detail = output if result.status == "ok" else f"{result.status}: {result.error}"
            lines.append(f"  {result.step_id} [{result.executor}, check: {check}] {detail}")
    return "\n".join(lines)


def render_messages(
    task: Task,
    profiles: list[ExecutorProfile],
    milestones: list[Milestone],
    repair_error: str | None = None,
    executor_last: bool = False,
    estimates_slope: float | None = None,
    executor_levels: bool = False,
    hints_slope: float | None = None,
) -> list[dict[str, str]]:
    """Chat messages for the next orchestrator turn (system: contract and cards; user: task,
    with `estimates_slope` each subtask's expected success per executor, and history, with
    `hints_slope` saying of each doubtful result whether a stronger executor is left)."""
    user = task.prompt
    if estimates_slope is not None:
        estimates = subtask_estimates(task, profiles, estimates_slope)
        user += f"\n\nExpected success, cheapest executor first:\n{estimates}"
    stronger = (
        stronger_untried(task, profiles, milestones, hints_slope)
        if hints_slope is not None
        else None
    )
    user += f"\n\nHistory:\n{render_history(milestones, stronger=stronger)}"
    if repair_error:
        user += f"\n\nYour last answer was invalid: {repair_error}\nAnswer again with valid JSON."
    system = f"{contract(executor_last, executor_levels)}\n\nExecutors:\n{executor_cards(profiles)}"
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": user},
    ]


def orchestrator_messages(
    params: Params,
    task: Task,
    profiles: list[ExecutorProfile],
    milestones: list[Milestone],
    repair_error: str | None = None,
) -> list[dict[str, str]]:
    """`render_messages` in the prompt contract `params.orchestrator` sets (step key order,
    per-subtask estimates, executor levels): the turn the policy and both GRPO trainers show
    the model."""
    return render_messages(
        task,
        profiles,
        milestones,
        repair_error,
        params.orchestrator.executor_last,
        params.estimates_slope(),
        params.orchestrator.executor_levels,
        params.hints_slope(),
    )


def plan_text(plan: Plan, executor_last: bool = False) -> str:
    """The orchestrator's answer for `plan`, as the model should write it (compact JSON, the
    step keys in the contract's order)."""
    if not executor_last:
        return plan.model_dump_json(exclude_none=False)
    data = plan.model_dump()
    data["steps"] = [{key: step[key] for key in EXECUTOR_LAST_KEYS} for step in data["steps"]]
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)
