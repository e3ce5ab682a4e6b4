"""Structured decoding of plans: the schema that forbids self-dependencies and cycles, and the
in-process constraint (llguidance) on a real model."""

from __future__ import annotations

import json

import jsonschema
import pytest

from easy_core.evaluation import load_pool
from easy_core.params import Params
from easy_core.policies.structured import dependency_order, plan_schema
from easy_core.schemas import Task
from easy_core.suites.sim import SimSuite
from tests.conftest import SIM_DEFAULT


def teacher_plan(params: Params, task: Task) -> dict:
    """greedy's first plan for `task` (the form the orchestrator is trained on)."""
    from easy_core.evaluation import run_episodes
    from easy_core.runtime.episode import EpisodeRunner

    pool = load_pool(SIM_DEFAULT, params)
    runner = EpisodeRunner(pool, params, SimSuite.check)

    [trajectory] = run_episodes([task], runner, "greedy", 0)
    return trajectory.milestones[0].plan.model_dump()


@pytest.fixture(scope="module")
def task(params: Params) -> Task:
    return next(t for t in SimSuite(params.sim).tasks("test", 20, 0) if len(t.subtasks) >= 4)


def dag_schema(params: Params, task: Task, **kw) -> dict:
    names = list(load_pool(SIM_DEFAULT, params).executors)
    return plan_schema(names, [s.id for s in task.subtasks], task=task, milestone=1, **kw)


def short_plan_schema(schema: dict) -> dict:
    """`schema` with short strings, so that even an untrained model finishes a plan within a
    few dozen tokens (it would otherwise write instructions to the token cap)."""
    schema["properties"]["milestone"] = {"type": "string", "maxLength": 12}
    for variant in schema["properties"]["steps"]["items"]["anyOf"]:
        variant["properties"]["instruction"] = {"type": "string", "maxLength": 12}
    return schema


def test_the_teachers_plan_fits_the_dag_schema(params: Params, task: Task) -> None:
    plan = teacher_plan(params, task)
    jsonschema.validate(plan, dag_schema(params, task))
    jsonschema.validate(plan, dag_schema(params, task, must_plan=True))
    answer = {"milestone": "answer", "steps": [], "final_answer": "42"}
    jsonschema.validate(answer, dag_schema(params, task))
    with pytest.raises(jsonschema.ValidationError):  # the first turn has nothing to answer from
        jsonschema.validate(answer, dag_schema(params, task, must_plan=True))


def test_the_dag_schema_rejects_self_dependency_cycles_and_unknown_executors(
    params: Params, task: Task
) -> None:
    plan = teacher_plan(params, task)
    schema = dag_schema(params, task)
    last = plan["steps"][-1]
    for broken in (
        {**last, "depends_on": [last["id"]]},  # itself
        {**plan["steps"][0], "depends_on": [last["id"]]},  # a later step: a cycle
        {**last, "executor": "gpt-nonexistent"},
        {**last, "id": "m2-" + last["id"].split("-", 1)[1]},  # another milestone's id
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**plan, "steps": [*plan["steps"][:-1], broken]}, schema)


def test_later_milestones_may_depend_on_earlier_steps(params: Params, task: Task) -> None:
    first = task.subtasks[0].id
    schema = plan_schema(
        list(load_pool(SIM_DEFAULT, params).executors),
        [s.id for s in task.subtasks],
        task=task,
        milestone=2,
        earlier_steps=["m1-" + first],
    )
    step = {
        "id": f"m2-{first}",
        "executor": "sim-m",
        "instruction": "again",
        "depends_on": [f"m1-{first}"],
        "covers": [first],
    }
    jsonschema.validate({"milestone": "retry", "steps": [step], "final_answer": None}, schema)


def test_dependency_order_follows_dependencies_not_listing(task: Task) -> None:
    first, second, *_ = task.subtasks
    subs = [
        first.model_copy(update={"id": "b", "depends_on": ["a"]}),
        second.model_copy(update={"id": "a", "depends_on": []}),
        second.model_copy(update={"id": "c", "depends_on": []}),
    ]
    assert dependency_order(task.model_copy(update={"subtasks": subs})) == ["a", "b", "c"]


def test_in_process_decoding_follows_the_schema(params: Params, task: Task) -> None:
    """The untrained base model answers prose; under the constraint it writes a plan whose
    every step is a subtask of the task and depends on nothing after it."""
    from easy_core.graph import parse_plan, validate_plan
    from easy_core.policies.llm import generate_hf
    from easy_core.prompting import render_messages

    pool = load_pool(SIM_DEFAULT, params)
    messages = render_messages(task, pool.profiles, [])
    settings = params.orchestrator.model_copy(
        update={"model": "smollm2-135m", "max_new_tokens": 48, "structured": False}
    )
    free, _ = generate_hf(messages, settings)
    with pytest.raises(json.JSONDecodeError):
        json.loads(free)
    schema = short_plan_schema(dag_schema(params, task, max_steps=1, must_plan=True))
    structured = settings.model_copy(update={"structured": True, "max_new_tokens": 120})
    text, tokens = generate_hf(messages, structured, schema=schema)
    plan = parse_plan(text)
    validate_plan(plan, set(pool.executors), max_steps=1, subtask_ids=task.subtask_index)
    assert 0 < tokens <= 120


def test_valid_plan_rate_counts_errors_and_sends_the_first_turn_schema(
    params: Params, task: Task
) -> None:
    from easy_core.training.validity import valid_plan_rate
    from tests.fake_openai import FakeOpenAI

    plan = teacher_plan(params, task)
    last = plan["steps"][-1]
    plan["steps"][-1] = {**last, "depends_on": [last["id"]]}
    with FakeOpenAI(reply=json.dumps(plan)) as server:
        remote = params.model_copy(
            update={
                "orchestrator": params.orchestrator.model_copy(
                    update={"backend": "openai", "endpoint": server.url, "model": "orch"}
                )
            }
        )
        report = valid_plan_rate(remote, SIM_DEFAULT, 2)
    assert report["valid"] == 0 and report["tasks"] == 2
    assert sum(report["errors"].values()) == 2
    assert all("depends on itself" in error for error in report["errors"])
    low, high = report["valid_rate_95ci"]
    assert low == 0.0 and 0.5 < high < 1.0
    schema = server.requests[0]["body"]["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["steps"]["minItems"] == 1  # a first turn must plan


def test_a_batch_decodes_each_row_under_its_own_schema(params: Params, task: Task) -> None:
    """One generate call, two tasks: each row's plan is valid for its own task only."""
    from easy_core.graph import parse_plan, validate_plan
    from easy_core.policies.llm import generate_hf_batch
    from easy_core.prompting import render_messages

    pool = load_pool(SIM_DEFAULT, params)
    small = min(SimSuite(params.sim).tasks("test", 40, 0), key=lambda t: len(t.subtasks))
    assert len(small.subtasks) < len(task.subtasks)
    tasks = [task, small]
    settings = params.orchestrator.model_copy(
        update={"model": "smollm2-135m", "max_new_tokens": 120, "structured": True}
    )
    answers = generate_hf_batch(
        [render_messages(t, pool.profiles, []) for t in tasks],
        settings,
        [short_plan_schema(dag_schema(params, t, max_steps=2, must_plan=True)) for t in tasks],
    )
    for t, (text, tokens) in zip(tasks, answers, strict=True):
        plan = parse_plan(text)
        validate_plan(plan, set(pool.executors), max_steps=2, subtask_ids=t.subtask_index)
        assert 0 < tokens <= 120
    covered = {c for s in parse_plan(answers[1][0]).steps for c in s.covers}
    assert covered <= {s.id for s in small.subtasks}
