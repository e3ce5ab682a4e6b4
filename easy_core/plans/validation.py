"""Plans as dependency graphs: parsing, validation, and the shape measures engines report.

A plan's steps may depend on steps of the same plan or on steps finished in earlier milestones
(`prior_step_ids`); only same-plan edges form the graph the engine schedules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping

import networkx as nx
from pydantic import ValidationError

from easy_core.core.config import describe_validation_error
from easy_core.core.errors import (
    DuplicateStepError,
    EmptyPlanError,
    PlanCycleError,
    PlanParseError,
    PlanSchemaError,
    PlanTooLargeError,
    SelfDependencyError,
    UnknownDependencyError,
    UnknownExecutorError,
    UnknownPlaceholderError,
    UnknownSubtaskError,
)
from easy_core.core.schemas import Plan

PLACEHOLDER = re.compile(r"\{([A-Za-z0-9][A-Za-z0-9_.\-]{0,63})\}")
ANSWER_REFERENCE = re.compile(r"^\{([A-Za-z0-9][A-Za-z0-9_.\-]{0,63})\}$")


def answer_reference(final_answer: str | None) -> str | None:
    """The step id a final answer cites (`"{m2-t6}"`: that step's result is the answer)."""
    match = ANSWER_REFERENCE.match(final_answer.strip()) if final_answer else None
    return match.group(1) if match else None


def parse_plan(text: str | bytes) -> Plan:
    """Parse one orchestrator turn from JSON text. Raises PlanParseError or PlanSchemaError."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise PlanParseError(f"plan is not valid JSON: {exc}") from None
    return plan_from_data(data)


def plan_from_data(data: object) -> Plan:
    if not isinstance(data, dict):
        raise PlanSchemaError(
            f"plan must be a JSON object with 'milestone', 'steps', 'final_answer'; "
            f"got {type(data).__name__}"
        )
    try:
        return Plan.model_validate(data)
    except (ValidationError, RecursionError) as exc:
        detail = describe_validation_error(exc) if isinstance(exc, ValidationError) else str(exc)
        raise PlanSchemaError(f"plan has wrong fields or types:\n{detail}") from None


def validate_plan(
    plan: Plan,
    executors: Iterable[str] | None = None,
    *,
    max_steps: int = 64,
    prior_step_ids: Iterable[str] = (),
    subtask_ids: Iterable[str] | None = None,
) -> None:
    """Check a plan can run; raise the first problem found as a typed PlanError.

    Checks, in order: empty, a final answer citing a step without a result, too many steps,
    duplicate ids (also against earlier milestones),
    self-dependency, unknown dependency, unknown executor, unknown subtask in `covers`,
    placeholders naming a step the instruction does not depend on, cycles.
    """
    steps = plan.steps
    prior = _as_set(prior_step_ids) or set()
    if not steps:
        if plan.final_answer is None:
            raise EmptyPlanError("plan has no steps and no final_answer; give at least one step")
        cited = answer_reference(plan.final_answer)
        if cited is not None and cited not in prior:
            raise UnknownDependencyError(
                f"final_answer cites step {cited!r}, which has no result; cite a step of an "
                "earlier milestone or write the answer out"
            )
        return
    if len(steps) > max_steps:
        raise PlanTooLargeError(
            f"plan has {len(steps)} steps; the limit is {max_steps} (limits.max_steps_per_plan)"
        )
    ids: set[str] = set()
    for step in steps:
        if step.id in ids or step.id in prior:
            where = "an earlier milestone" if step.id in prior else "this plan"
            raise DuplicateStepError(f"step id {step.id!r} is used twice (already in {where})")
        ids.add(step.id)
    known_executors = _as_set(executors)
    known_subtasks = _as_set(subtask_ids)
    for step in steps:
        deps = set(step.depends_on)
        if step.id in deps:
            raise SelfDependencyError(f"step {step.id!r} depends on itself")
        for dep in step.depends_on:
            if dep not in ids and dep not in prior:
                raise UnknownDependencyError(
                    f"step {step.id!r} depends on {dep!r}, which is no step of this plan "
                    "or of an earlier milestone"
                )
        if known_executors is not None and step.executor not in known_executors:
            raise UnknownExecutorError(
                f"step {step.id!r} uses executor {step.executor!r}, which is not in the pool; "
                f"known: {', '.join(sorted(known_executors))}"
            )
        if known_subtasks is not None and step.covers:
            for sub in step.covers:
                if sub not in known_subtasks:
                    raise UnknownSubtaskError(
                        f"step {step.id!r} covers {sub!r}, which is no subtask of the task"
                    )
        for name in PLACEHOLDER.findall(step.instruction):
            if (name in ids or name in prior) and name not in deps:
                raise UnknownPlaceholderError(
                    f"instruction of step {step.id!r} uses {{{name}}} but the step does not "
                    f"depend on {name!r}; add it to depends_on"
                )
    if not _listed_in_order(plan) and topological_order(plan) is None:
        cycle = [edge[0] for edge in nx.find_cycle(plan_graph(plan, ids))]
        raise PlanCycleError(
            "plan has a dependency cycle: " + " -> ".join([*cycle, cycle[0]]), cycle
        )


def _listed_in_order(plan: Plan) -> bool:
    """Whether every same-plan dependency points to an earlier step in the list, which rules
    out a cycle at once (the usual case: plans are written in order)."""
    position = {step.id: i for i, step in enumerate(plan.steps)}
    return all(
        position.get(dep, -1) < i for i, step in enumerate(plan.steps) for dep in step.depends_on
    )


def _as_set(items: Iterable[str] | None) -> Collection[str] | None:
    if items is None or isinstance(items, set | frozenset | dict):
        return items  # type: ignore[return-value]
    return set(items)


def topological_order(plan: Plan) -> list[str] | None:
    """Step ids in dependency order (Kahn's algorithm, stable in plan order), or None if the
    plan's same-plan dependencies contain a cycle. Pure Python: it runs on every turn."""
    ids = {step.id for step in plan.steps}
    indegree = {step.id: 0 for step in plan.steps}
    children: dict[str, list[str]] = {step.id: [] for step in plan.steps}
    for step in plan.steps:
        for dep in set(step.depends_on):
            if dep in ids:
                indegree[step.id] += 1
                children[dep].append(step.id)
    order = [sid for sid, degree in indegree.items() if degree == 0]
    for sid in order:  # the list grows while we walk it
        for child in children[sid]:
            indegree[child] -= 1
            if indegree[child] == 0:
                order.append(child)
    return order if len(order) == len(ids) else None


def plan_graph(plan: Plan, step_ids: set[str] | None = None) -> nx.DiGraph:
    """Edges run from a dependency to its dependent; steps of earlier milestones are left out."""
    ids = step_ids if step_ids is not None else {step.id for step in plan.steps}
    graph = nx.DiGraph()
    graph.add_nodes_from(step.id for step in plan.steps)
    graph.add_edges_from(
        (dep, step.id) for step in plan.steps for dep in step.depends_on if dep in ids
    )
    return graph


def topological_levels(graph: nx.DiGraph) -> list[list[str]]:
    return [sorted(level) for level in nx.topological_generations(graph)]


def width(graph: nx.DiGraph) -> int:
    """Largest number of steps in one topological level."""
    return max((len(level) for level in nx.topological_generations(graph)), default=0)


def critical_path_s(plan: Plan, durations: Mapping[str, float]) -> float:
    """Length of the plan's longest dependency chain, weighting each step by its duration: the
    lower bound on any schedule's makespan with unlimited parallelism. The plan must be acyclic."""
    order = topological_order(plan)
    if order is None:
        raise ValueError("critical path of a cyclic plan")
    deps = {step.id: step.depends_on for step in plan.steps}
    finish: dict[str, float] = {}
    for node in order:
        start = max((finish[dep] for dep in deps[node] if dep in finish), default=0.0)
        finish[node] = start + durations.get(node, 0.0)
    return max(finish.values(), default=0.0)


def substitute_placeholders(instruction: str, outputs: Mapping[str, str]) -> str:
    """Fill `{id}` with the output of step `id`, in one pass: text inside a substituted output is
    never scanned again, so an output cannot inject further substitutions."""
    return PLACEHOLDER.sub(lambda m: outputs.get(m.group(1), m.group(0)), instruction)
