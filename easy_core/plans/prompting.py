"""What an LLM orchestrator reads and writes: the executor cards, the task, the milestone history
(each result compressed to fit), and the JSON output contract (docs/ARCHITECTURE.md,
"Contracts")."""

from __future__ import annotations

from easy_core.core.schemas import ExecutorProfile, Milestone, Plan, Task

CONTRACT = (
    "You orchestrate a pool of executors. Each turn, answer with exactly one JSON object:\n"
    '{"milestone": "short goal of this stage", "steps": [{"id": "s1", "executor": "NAME", '
    '"instruction": "...", "depends_on": [], "covers": ["t1"]}], "final_answer": null}\n'
    "Steps without a dependency path between them run in parallel. Write {s1} in an "
    "instruction to insert the result of step s1 (which must be in depends_on); a step may "
    "depend on steps of earlier milestones. Results marked `check: doubtful` are likely wrong. "
    'When you know the answer, reply {"milestone": "answer", "steps": [], '
    '"final_answer": "..."}, or "{s1}" to answer with the result of step s1. '
    "Prefer the cheapest executor that will succeed."
)
MAX_OUTPUT_CHARS = 200


def executor_cards(profiles: list[ExecutorProfile]) -> str:
    return "\n".join(f"- {profile.card()}" for profile in profiles)


def render_history(milestones: list[Milestone], max_chars: int = MAX_OUTPUT_CHARS) -> str:
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
            detail = output if result.status == "ok" else f"{result.status}: {result.error}"
            lines.append(f"  {result.step_id} [{result.executor}, check: {check}] {detail}")
    return "\n".join(lines)


def render_messages(
    task: Task,
    profiles: list[ExecutorProfile],
    milestones: list[Milestone],
    repair_error: str | None = None,
) -> list[dict[str, str]]:
    """Chat messages for the next orchestrator turn (system: contract and cards; user: task and
    history)."""
    user = f"{task.prompt}\n\nHistory:\n{render_history(milestones)}"
    if repair_error:
        user += f"\n\nYour last answer was invalid: {repair_error}\nAnswer again with valid JSON."
    return [
        {"role": "system", "content": f"{CONTRACT}\n\nExecutors:\n{executor_cards(profiles)}"},
        {"role": "user", "content": user},
    ]


def plan_text(plan: Plan) -> str:
    """The orchestrator's answer for `plan`, as the model should write it."""
    return plan.model_dump_json(exclude_none=False)
