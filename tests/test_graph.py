from __future__ import annotations

import json

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from easy_core.core.errors import (
    DuplicateStepError,
    EmptyPlanError,
    PlanCycleError,
    PlanError,
    PlanParseError,
    PlanSchemaError,
    PlanTooLargeError,
    SelfDependencyError,
    UnknownDependencyError,
    UnknownExecutorError,
    UnknownPlaceholderError,
    UnknownSubtaskError,
)
from easy_core.core.schemas import Plan, Step
from easy_core.plans.validation import (
    critical_path_s,
    parse_plan,
    plan_graph,
    substitute_placeholders,
    topological_levels,
    validate_plan,
    width,
)
from tests.helpers import random_dags

EXECUTORS = {"small", "large"}


def plan(*steps: tuple[str, list[str]], executor: str = "small") -> Plan:
    return Plan(
        steps=[
            Step(id=sid, executor=executor, instruction=f"do {sid}", depends_on=deps)
            for sid, deps in steps
        ]
    )


def test_valid_plan_passes():
    validate_plan(plan(("a", []), ("b", ["a"]), ("c", ["a", "b"])), EXECUTORS)


@pytest.mark.parametrize(
    ("bad", "error", "words"),
    [
        (Plan(steps=[]), EmptyPlanError, "no steps"),
        (plan(("a", []), ("a", [])), DuplicateStepError, "'a' is used twice"),
        (plan(("a", ["a"])), SelfDependencyError, "'a' depends on itself"),
        (plan(("a", ["ghost"])), UnknownDependencyError, "'ghost'"),
        (plan(("a", []), executor="huge"), UnknownExecutorError, "'huge'"),
        (plan(("a", ["c"]), ("b", ["a"]), ("c", ["b"])), PlanCycleError, "cycle"),
    ],
)
def test_each_problem_has_its_typed_error(bad, error, words):
    with pytest.raises(error, match=words):
        validate_plan(bad, EXECUTORS)


def test_cycle_error_names_the_nodes_of_the_cycle():
    with pytest.raises(PlanCycleError) as info:
        validate_plan(plan(("x", []), ("a", ["c", "x"]), ("b", ["a"]), ("c", ["b"])), EXECUTORS)
    assert set(info.value.cycle) == {"a", "b", "c"}
    for name in "abc":
        assert name in str(info.value)
    assert "x" not in info.value.cycle


def test_too_many_steps_names_the_limit():
    big = plan(*[(f"s{i}", []) for i in range(11)])
    with pytest.raises(PlanTooLargeError, match="11 steps; the limit is 10"):
        validate_plan(big, EXECUTORS, max_steps=10)


def test_unknown_subtask_and_placeholder_without_dependency():
    covers = Plan(steps=[Step(id="a", executor="small", instruction="", covers=["t9"])])
    with pytest.raises(UnknownSubtaskError, match="t9"):
        validate_plan(covers, EXECUTORS, subtask_ids=["t1"])
    placeholder = Plan(
        steps=[
            Step(id="a", executor="small", instruction="x"),
            Step(id="b", executor="small", instruction="use {a}"),
        ]
    )
    with pytest.raises(UnknownPlaceholderError, match="add it to depends_on"):
        validate_plan(placeholder, EXECUTORS)


def test_dependencies_on_earlier_milestones_are_allowed_but_ids_stay_unique():
    later = plan(("m2-a", ["m1-a"]))
    validate_plan(later, EXECUTORS, prior_step_ids={"m1-a"})
    with pytest.raises(DuplicateStepError, match="earlier milestone"):
        validate_plan(plan(("m1-a", [])), EXECUTORS, prior_step_ids={"m1-a"})


def test_final_answer_turn_needs_no_steps():
    validate_plan(Plan(final_answer="42"), EXECUTORS)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("this is not json", PlanParseError),
        (b"\xff\xfe\x00", PlanParseError),
        ("[1, 2]", PlanSchemaError),
        ('{"steps": "abc"}', PlanSchemaError),
        ('{"steps": [{"id": "a", "executor": 3, "instruction": "x"}]}', PlanSchemaError),
        ('{"steps": [{"id": "a"}]}', PlanSchemaError),
        ("[" * 100_000, PlanParseError),
    ],
)
def test_parse_errors_are_typed(text, error):
    with pytest.raises(error):
        parse_plan(text)


def test_schema_error_names_the_field():
    with pytest.raises(PlanSchemaError, match=r"steps\.0\.executor"):
        parse_plan('{"steps": [{"id": "a", "executor": 3, "instruction": "x"}]}')


def test_placeholders_are_substituted_once():
    text = substitute_placeholders("a={a} b={b} keep={zz} {}", {"a": "{b}", "b": "B"})
    assert text == "a={b} b=B keep={zz} {}"


def test_graph_measures():
    p = plan(("a", []), ("b", ["a"]), ("c", ["a"]), ("d", ["b", "c"]))
    graph = plan_graph(p)
    assert topological_levels(graph) == [["a"], ["b", "c"], ["d"]]
    assert width(graph) == 2
    assert critical_path_s(p, {"a": 1.0, "b": 2.0, "c": 5.0, "d": 1.0}) == 7.0


@settings(max_examples=200, deadline=None)
@given(random_dags())
def test_validation_accepts_every_acyclic_plan(steps):
    validate_plan(plan(*steps), EXECUTORS)


@settings(max_examples=200, deadline=None)
@given(random_dags(), st.data())
def test_validation_rejects_every_plan_with_a_cycle(steps, data):
    deps = {sid: list(d) for sid, d in steps}
    ids = list(deps)
    # close a cycle: pick a path a -> ... and add a back edge, or a 2+-cycle between any two
    cycle = (
        data.draw(
            st.lists(st.sampled_from(ids), min_size=2, max_size=min(5, len(ids)), unique=True)
        )
        if len(ids) >= 2
        else None
    )
    if cycle is None:
        return
    for before, after in zip(cycle, cycle[1:] + cycle[:1], strict=True):
        deps[after].append(before)
    cyclic = plan(*[(sid, sorted(set(d))) for sid, d in deps.items()])
    graph = nx.DiGraph([(d, sid) for sid, ds in deps.items() for d in ds])
    assert not nx.is_directed_acyclic_graph(graph)
    with pytest.raises(PlanCycleError) as info:
        validate_plan(cyclic, EXECUTORS)
    found = info.value.cycle
    for a, b in zip(found, found[1:] + found[:1], strict=True):
        assert graph.has_edge(a, b)


def test_every_validation_error_is_a_plan_error():
    for bad in [
        "{",
        '{"steps": []}',
        json.dumps(
            {"steps": [{"id": "a", "executor": "small", "instruction": "", "depends_on": ["a"]}]}
        ),
    ]:
        with pytest.raises(PlanError):
            validate_plan(parse_plan(bad), EXECUTORS)
