"""Structured decoding of plans: the schema that forbids self-dependencies and cycles, and the
in-process constraint (llguidance) on a real model."""

from __future__ import annotations

import json

import jsonschema
import pytest

from easy_core.core.params import Params
from easy_core.core.schemas import Task
from easy_core.executors.pool import load_pool
from easy_core.plans.structured import dependency_order, open_subtasks, turn_schema
from easy_core.world.suites.sim import SimSuite
from tests.conftest import SIM_DEFAULT


def teacher_plan(params: Params, task: Task) -> dict:
    """greedy's first plan for `task` (the form the orchestrator is trained on)."""
    from easy_core.policies.batch import run_episodes
    from easy_core.runtime.episode import EpisodeRunner

    pool = load_pool(SIM_DEFAULT, params)
    runner = EpisodeRunner(pool, params, SimSuite.check)

    [trajectory] = run_episodes([task], runner, "greedy", 0)
    return trajectory.milestones[0].plan.model_dump()


@pytest.fixture(scope="module")
def task(params: Params) -> Task:
    return next(t for t in SimSuite(params.sim).tasks("test", 20, 0) if len(t.subtasks) >= 4)


def dag_schema(params: Params, task: Task, milestones: list | None = None, **kw) -> dict:
    names = list(load_pool(SIM_DEFAULT, params).executors)
    return turn_schema(task, names, milestones or [], kw.get("max_steps", 64))


def short_plan_schema(schema: dict, max_steps: int | None = None) -> dict:
    """`schema` with short strings (and at most `max_steps` steps), so that even an untrained
    model finishes a plan within a few dozen tokens (else it writes instructions to the cap)."""
    short = {"type": "string", "maxLength": 12}
    shapes = schema.get("anyOf", [schema])
    for shape in shapes:
        shape["properties"]["milestone"] = short
        steps = shape["properties"]["steps"]
        if max_steps is not None and "anyOf" in steps:
            steps["anyOf"] = steps["anyOf"][:max_steps]
        for prefix in steps.get("anyOf", [steps]):
            for step in prefix.get("prefixItems", []):
                step["properties"]["instruction"] = short
    return schema


def first_results(params: Params, task: Task, plan: dict, doubted: set[str] = frozenset()):
    """A milestone that ran `plan`, every step ok (those covering `doubted` doubted)."""
    from easy_core.core.schemas import Milestone, Plan, StepResult

    results = [
        StepResult(
            step_id=step["id"],
            executor=step["executor"],
            status="ok",
            output=f"{step['covers'][0]}=x",
            covers=step["covers"],
            sub_answers={step["covers"][0]: "x"},
            self_check=step["covers"][0] not in doubted,
        )
        for step in plan["steps"]
    ]
    return Milestone(index=0, plan=Plan.model_validate(plan), results=results)


def test_the_teachers_plan_fits_the_task_schema(params: Params, task: Task) -> None:
    plan = teacher_plan(params, task)
    schema = dag_schema(params, task)
    jsonschema.validate(plan, schema)
    # the first turn has nothing to answer from
    for answer in ("42", "{m1-t1}"):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"milestone": "a", "steps": [], "final_answer": answer}, schema)
    done = [first_results(params, task, plan)]
    sink_step = f"m1-{task.sink.id}"
    after = dag_schema(params, task, done)
    jsonschema.validate({"milestone": "a", "steps": [], "final_answer": f"{{{sink_step}}}"}, after)
    with pytest.raises(jsonschema.ValidationError):  # an answer cites what produced it
        jsonschema.validate({"milestone": "a", "steps": [], "final_answer": "x"}, after)


def test_the_task_schema_fixes_the_dag_and_leaves_executors_and_size_free(
    params: Params, task: Task
) -> None:
    plan = teacher_plan(params, task)
    schema = dag_schema(params, task)
    steps = plan["steps"]
    jsonschema.validate({**plan, "steps": steps[:1]}, schema)  # a first slice of the task
    jsonschema.validate(
        {**plan, "steps": [{**steps[0], "executor": "sim-tool"}, *steps[1:]]}, schema
    )
    needy = next(i for i, step in enumerate(steps) if step["depends_on"])
    for broken in (
        [*steps[:needy], {**steps[needy], "depends_on": []}],  # an input left out
        [*steps[:needy], {**steps[needy], "depends_on": [steps[needy]["id"]]}],  # itself
        steps[1:],  # a subtask before its inputs
        [{**steps[0], "executor": "gpt-nonexistent"}],
        [{**steps[0], "id": "m2-" + steps[0]["id"].split("-", 1)[1]}],  # another milestone
        [{**steps[0], "instruction": "again " * 100}],  # free text runs on (a looping model)
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**plan, "steps": broken}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**plan, "milestone": "m" * 500}, schema)
    # a placeholder may name only the step's inputs: never itself, nor a step it skips
    own = {**steps[needy], "instruction": f"redo {{{steps[needy]['id']}}}"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**plan, "steps": [*steps[:needy], own]}, schema)
    cites = {**steps[needy], "instruction": f"use {{{steps[needy]['depends_on'][0]}}}"}
    jsonschema.validate({**plan, "steps": [*steps[:needy], cites]}, schema)


def test_the_decoder_compiles_the_task_schema(params: Params, task: Task) -> None:
    """llguidance takes the schema's bounds and placeholder patterns: the teacher's plan, as
    the model would write it, passes token by token; one citing its own step does not."""
    from easy_core.core.schemas import Plan
    from easy_core.executors.hf_models import load_causal_lm
    from easy_core.plans.prompting import plan_text
    from easy_core.plans.structured import schema_accepts

    _, tokenizer = load_causal_lm("smollm2-135m")
    plan = teacher_plan(params, task)
    schema = dag_schema(params, task)
    step = plan["steps"][0]
    own = {**plan, "steps": [{**step, "instruction": f"{{{step['id']}}}"}, *plan["steps"][1:]]}
    for candidate, allowed in ((plan, True), (own, False)):
        text = plan_text(Plan.model_validate(candidate))
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert schema_accepts(tokenizer, schema, ids) is allowed


def test_the_executor_last_contract_is_what_prompt_schema_and_decoder_ask_for(
    params: Params, task: Task
) -> None:
    """issue 27's lever: with orchestrator.executor_last a step's executor comes after what it
    covers and asks, in the prompt's example, the teacher's text and the decoder's grammar;
    the decoder refuses the other order, and either text parses to the same plan."""
    from easy_core.core.schemas import Plan
    from easy_core.executors.hf_models import load_causal_lm
    from easy_core.plans.prompting import contract, plan_text
    from easy_core.plans.structured import schema_accepts
    from easy_core.plans.validation import parse_plan

    _, tokenizer = load_causal_lm("smollm2-135m")
    plan = Plan.model_validate(teacher_plan(params, task))
    names = list(load_pool(SIM_DEFAULT, params).executors)
    first, last = plan_text(plan), plan_text(plan, executor_last=True)
    assert last.index('"covers"') < last.index('"instruction"') < last.index('"executor"')
    assert first.index('"executor"') < first.index('"instruction"') < first.index('"covers"')
    assert parse_plan(first) == parse_plan(last) == plan
    prompt = contract(executor_last=True)
    assert prompt.index('"covers"') < prompt.index('"executor"') and prompt != contract()
    for executor_last, (allowed, refused) in ((False, (first, last)), (True, (last, first))):
        schema = turn_schema(task, names, [], 64, executor_last)
        for text, accepted in ((allowed, True), (refused, False)):
            ids = tokenizer.encode(text, add_special_tokens=False)
            assert schema_accepts(tokenizer, schema, ids) is accepted, (executor_last, text)


def test_later_milestones_run_what_is_open_on_the_results_they_have(
    params: Params, task: Task
) -> None:
    """After a first slice, the next plan starts where it stopped and depends on the earlier
    milestone's steps."""
    order = dependency_order(task)
    plan = teacher_plan(params, task)
    first = {**plan, "steps": plan["steps"][:2]}
    done = [first_results(params, task, first)]
    assert open_subtasks(task, done) == order[2:]
    schema = dag_schema(params, task, done)
    nxt = order[2]
    inputs = [
        f"m1-{dep}" if dep in order[:2] else f"m2-{dep}" for dep in task.subtask(nxt).depends_on
    ]
    step = {
        "id": f"m2-{nxt}",
        "executor": "sim-m",
        "instruction": "go",
        "depends_on": inputs,
        "covers": [nxt],
    }
    jsonschema.validate({"milestone": "more", "steps": [step], "final_answer": None}, schema)
    doubted = [first_results(params, task, first, doubted={order[0]})]
    assert open_subtasks(task, doubted) == order[2:]  # a doubted result is not reopened


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
    from easy_core.plans.prompting import render_messages
    from easy_core.plans.validation import parse_plan, validate_plan
    from easy_core.policies.llm import generate_hf

    pool = load_pool(SIM_DEFAULT, params)
    messages = render_messages(task, pool.profiles, [])
    settings = params.orchestrator.model_copy(
        update={"model": "smollm2-135m", "max_new_tokens": 48, "structured": False}
    )
    free, _ = generate_hf(messages, settings)
    with pytest.raises(json.JSONDecodeError):
        json.loads(free)
    schema = short_plan_schema(dag_schema(params, task, max_steps=1))
    structured = settings.model_copy(update={"structured": True, "max_new_tokens": 120})
    text, tokens = generate_hf(messages, structured, schema=schema)
    plan = parse_plan(text)
    validate_plan(plan, set(pool.executors), max_steps=1, subtask_ids=task.subtask_index)
    assert 0 < tokens <= 120


def test_valid_plan_rate_counts_errors_and_sends_the_first_turn_schema(
    params: Params, task: Task
) -> None:
    from easy_core.evaluation.plan_validity import valid_plan_rate
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
    assert schema["properties"]["final_answer"] == {"type": "null"}  # a first turn must plan


def test_a_batch_decodes_each_row_under_its_own_schema(params: Params, task: Task) -> None:
    """One generate call, two tasks: each row's plan is valid for its own task only."""
    from easy_core.plans.prompting import render_messages
    from easy_core.plans.validation import parse_plan, validate_plan
    from easy_core.policies.llm import generate_hf_batch

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
        [short_plan_schema(dag_schema(params, t, max_steps=2)) for t in tasks],
    )
    for t, (text, tokens) in zip(tasks, answers, strict=True):
        plan = parse_plan(text)
        validate_plan(plan, set(pool.executors), max_steps=2, subtask_ids=t.subtask_index)
        assert 0 < tokens <= 120
    covered = {c for s in parse_plan(answers[1][0]).steps for c in s.covers}
    assert covered <= {s.id for s in small.subtasks}


def test_hot_executor_sampling_scales_and_trains_only_the_executor_names(
    params: Params, task: Task
) -> None:
    """GRPO's exploration aimed at the executor choice: along the teacher's plan, the constraint
    scales the logits at exactly the tokens that spell a step's executor name, and the loss
    mask (`executor_token_mask`) marks exactly those tokens."""
    import torch

    from easy_core.executors.hf_models import load_causal_lm
    from easy_core.plans.structured import SchemaConstraint, executor_token_mask

    model, tokenizer = load_causal_lm("smollm2-135m")
    plan = teacher_plan(params, task)
    ids = tokenizer(json.dumps(plan, separators=(",", ":")))["input_ids"]
    mask = executor_token_mask(tokenizer, ids)

    runs, run = [], []
    for token, marked in zip(ids, mask, strict=True):
        if marked:
            run.append(token)
        elif run:
            runs.append(tokenizer.decode(run))
            run = []
    names = [step["executor"] for step in plan["steps"]]
    assert len(runs) == len(names)
    for text, name in zip(runs, names, strict=True):
        assert text.startswith(name + '"')  # the name, and the token that closes it

    prompt = tokenizer("plan:")["input_ids"]
    vocab = model.config.vocab_size
    constraint = SchemaConstraint(dag_schema(params, task), tokenizer, vocab, len(prompt), 2.0)
    torch.manual_seed(0)
    for i, marked in enumerate(mask):
        scores = torch.randn(1, vocab)
        out = constraint(torch.tensor([prompt + ids[:i]]), scores.clone())
        allowed = torch.isfinite(out[0])
        assert allowed[ids[i]]  # the teacher's plan is in the schema
        scaled = torch.allclose(out[0][allowed], 2.0 * scores[0][allowed])
        assert scaled == bool(marked), (i, tokenizer.decode(ids[: i + 1]))


def test_copies_of_a_prompt_share_one_prefill_and_generate_as_repeated_rows() -> None:
    """`generate_ids(..., copies=k)` prefills each prompt once and repeats its KV cache: greedy
    answers equal those of the prompt listed k times, left padding (prompts of different
    lengths) included, free and under a schema; and its preallocated cache decodes what
    transformers' own growing cache decodes."""
    import torch

    from easy_core.executors.hf_models import load_causal_lm
    from easy_core.policies.llm import chat_prompt_ids, generate_ids

    model, tokenizer = load_causal_lm("smollm2-135m")
    prompts = [
        chat_prompt_ids(tokenizer, [{"role": "user", "content": text}])
        for text in ("Name three prime numbers.", "Say hi.")
    ]
    assert len(prompts[0]) != len(prompts[1])
    schema = {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 12}}}
    for schemas in ([None, None], [schema, schema]):
        shared = generate_ids(model, tokenizer, prompts, schemas, 16, 0.0, copies=3)
        repeated = [p for p in prompts for _ in range(3)]
        alone = generate_ids(
            model, tokenizer, repeated, [s for s in schemas for _ in range(3)], 16, 0.0
        )
        assert shared == alone
        assert shared[0] != shared[3]  # the two prompts' rows did not trade places
    ids = torch.tensor([prompts[0]])
    with torch.no_grad():
        plain = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=16,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
        )
    free = generate_ids(model, tokenizer, prompts[:1], [None], 16, 0.0)[0]
    assert free == plain[0, len(prompts[0]) :].tolist()[: len(free)]
