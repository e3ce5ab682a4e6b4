"""Structured decoding of the orchestrator's plan: the JSON schema a grammar-constrained decoder
enforces (sent to vLLM or llama.cpp by the openai backend, compiled by llguidance for the
in-process hf backend).

For a task without declared subtasks the schema is the Plan's, with the pool's executor names
as an enum; a first turn must plan (with no result yet, an answer can only be made up).

For a task that declares its subtasks (the sim suite), the task itself fixes the dependency
graph, and the schema writes it down so that a small model cannot break it: a plan's steps are
the first j of the task's *open* subtasks in dependency order (those without a result, or
downstream of one), each under the id convention the policy is trained on
(`m{k}-{subtask}`, the teacher's), depending exactly on the steps that produce its inputs (this
milestone's, or the latest good result of an earlier one). What is left to the orchestrator is
what this project is about: how much of the task each milestone takes on (j), which executor
runs each step, and when to answer. A doubted result is not reopened: a model that reran it on
the same executor got the same doubt back until its milestones ran out (retries of doubted
results, the `greedy` baseline's escalation, are not expressible in this grammar yet). The
answer must cite a step that produced the task's final subtask (`"final_answer": "{m2-t6}"`,
resolved by the runtime to that step's result); before such a step exists the turn must plan.
Without these rules the SFT'd 135M model planned three steps of every task whatever its shape
and answered with made-up strings (docs/BENCHMARKS.md, "GRPO against SFT").

Steps of a prefix are tuples (`prefixItems`, one variant per length): llama.cpp's schema
converter ignores minItems/maxItems around prefixItems, so the lengths are spelled out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import networkx as nx

from easy_core.core.schemas import Milestone, Plan, StepResult, Task
from easy_core.plans.prompting import step_keys

# Bounded free text: without a bound a small model can loop inside a string until its token
# budget runs out, and the turn ends as unterminated JSON. The teacher's are far shorter.
MILESTONE_CHARS = 160
INSTRUCTION_CHARS = 240  # a step of a declared subtask; a free plan's step may carry a program
PROGRAM_CHARS = 4000

# Compact separators, no free whitespace: the form of the teacher's plans the model learnt.
COMPACT_JSON = {"item_separator": ",", "key_separator": ":", "whitespace_flexible": False}


def step_id(milestone: int, subtask: str) -> str:
    return f"m{milestone}-{subtask}"


def dependency_order(task: Task) -> list[str]:
    """The task's subtasks in dependency order, ties broken by the order the task lists them."""
    position = {sub.id: i for i, sub in enumerate(task.subtasks)}
    graph = nx.DiGraph()
    graph.add_nodes_from(position)
    graph.add_edges_from((dep, sub.id) for sub in task.subtasks for dep in sub.depends_on)
    return list(nx.lexicographical_topological_sort(graph, key=position.__getitem__))


def latest_good_results(milestones: Sequence[Milestone]) -> dict[str, StepResult]:
    """The newest successful result for each subtask (doubted ones included)."""
    latest: dict[str, StepResult] = {}
    for milestone in milestones:
        for result in milestone.results:
            if result.status == "ok":
                latest.update((sub_id, result) for sub_id in result.covers)
    return latest


def open_subtasks(
    task: Task, milestones: Sequence[Milestone], latest: dict[str, StepResult] | None = None
) -> list[str]:
    """Subtasks still to run, in dependency order: those without a successful result and
    those downstream of one (their inputs do not exist yet). `latest`: the milestones'
    `latest_good_results`, when the caller has them."""
    latest = latest_good_results(milestones) if latest is None else latest
    by_id = task.subtask_index
    open_ids: list[str] = []
    for sub_id in dependency_order(task):
        if sub_id not in latest or any(dep in open_ids for dep in by_id[sub_id].depends_on):
            open_ids.append(sub_id)
    return open_ids


def plan_schema(
    executors: Sequence[str] | None = None,
    *,
    must_plan: bool = False,
    executor_last: bool = False,
) -> dict[str, Any]:
    """The Plan's JSON schema; with the pool's executor names, those become an enum.
    `must_plan` asks for at least one step and no final answer. A step's properties come in
    the contract's order (a constrained decoder writes them in that order)."""
    schema = Plan.model_json_schema()
    schema["properties"]["milestone"]["maxLength"] = MILESTONE_CHARS
    step = schema["$defs"]["Step"]["properties"]
    step["instruction"]["maxLength"] = PROGRAM_CHARS
    if executors:
        step["executor"] = {"type": "string", "enum": sorted(executors)}
    schema["$defs"]["Step"]["properties"] = _in_order(step, executor_last)
    if must_plan:
        schema["properties"]["steps"]["minItems"] = 1
        schema["properties"]["final_answer"] = {"type": "null"}
        schema["required"] = ["milestone", "steps", "final_answer"]
    return schema


def without_string_rules(schema: Any) -> Any:
    """`schema` without its length bounds and patterns on strings, for llama-cpp-python's
    server, whose grammar converter spells a length bound out as one rule per character (its
    process dies on them)."""
    if isinstance(schema, dict):
        return {
            key: without_string_rules(value)
            for key, value in schema.items()
            if key not in ("maxLength", "minLength", "pattern")
        }
    if isinstance(schema, list):
        return [without_string_rules(value) for value in schema]
    return schema


def instruction_schema(inputs: Sequence[str]) -> dict[str, Any]:
    """A declared subtask's instruction: bounded free text whose `{placeholders}` name only the
    step's inputs (validation refuses any other: a model that cites its own step would write
    an invalid plan), no other braces."""
    allowed = "|".join(step.replace(".", "\\.") for step in inputs)
    pattern = f"^(?:[^{{}}]|\\{{(?:{allowed})\\}})*$" if inputs else "^[^{}]*$"
    return {"type": "string", "maxLength": INSTRUCTION_CHARS, "pattern": pattern}


def _strings(values: Sequence[str]) -> dict[str, Any]:
    """Exactly these strings, in this order (a fixed-length array)."""
    if not values:
        return {"type": "array", "maxItems": 0, "items": {"type": "string"}}
    return {
        "type": "array",
        "prefixItems": [{"const": value} for value in values],
        "items": False,
        "minItems": len(values),
        "maxItems": len(values),
    }


def _in_order(properties: dict[str, Any], executor_last: bool) -> dict[str, Any]:
    return {key: properties[key] for key in step_keys(executor_last) if key in properties}


def task_plan_schema(
    task: Task,
    executors: Sequence[str],
    milestones: Sequence[Milestone],
    max_steps: int,
    executor_last: bool = False,
) -> dict[str, Any]:
    """The schema of the turn after `milestones` on a task with declared subtasks (module doc)."""
    milestone = len(milestones) + 1
    latest = latest_good_results(milestones)
    pending = open_subtasks(task, milestones, latest)
    producer = {sub_id: result.step_id for sub_id, result in latest.items()}
    steps = []
    for sub_id in pending[:max_steps]:
        producer[sub_id] = step_id(milestone, sub_id)
        inputs = [producer[dep] for dep in task.subtask(sub_id).depends_on]
        properties = {
            "id": {"const": step_id(milestone, sub_id)},
            "executor": {"type": "string", "enum": sorted(executors)},
            "instruction": instruction_schema(inputs),
            "depends_on": _strings(inputs),
            "covers": _strings([sub_id]),
        }
        steps.append(
            {
                "type": "object",
                "properties": _in_order(properties, executor_last),
                "required": list(step_keys(executor_last)),
                "additionalProperties": False,
            }
        )
    answers = [
        f"{{{result.step_id}}}"
        for m in milestones
        for result in m.results
        if result.status == "ok" and task.sink.id in result.covers
    ]
    shapes = []
    if steps:
        prefixes = [
            {"type": "array", "prefixItems": steps[:j], "items": False}
            | {"minItems": j, "maxItems": j}
            for j in range(1, len(steps) + 1)
        ]
        shapes.append(_turn({"anyOf": prefixes}, {"type": "null"}))
    if answers:
        no_steps = {"type": "array", "maxItems": 0, "items": {"type": "object"}}
        shapes.append(_turn(no_steps, {"enum": answers}))
    return shapes[0] if len(shapes) == 1 else {"anyOf": shapes}


def _turn(steps: dict[str, Any], final_answer: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "milestone": {"type": "string", "maxLength": MILESTONE_CHARS},
            "steps": steps,
            "final_answer": final_answer,
        },
        "required": ["milestone", "steps", "final_answer"],
        "additionalProperties": False,
    }


def turn_schema(
    task: Task,
    executors: Sequence[str],
    milestones: Sequence[Milestone],
    max_steps: int,
    executor_last: bool = False,
) -> dict[str, Any]:
    """The schema of the plan that follows `milestones` (module doc), its steps' keys in the
    contract's order."""
    if task.subtasks:
        return task_plan_schema(task, executors, milestones, max_steps, executor_last)
    return plan_schema(executors, must_plan=not milestones, executor_last=executor_last)


EXECUTOR_KEY = '"executor":"'


class ExecutorNameTracker:
    """Follows a plan's text piece by piece: is the next token part of a step's executor name
    (after `"executor":"`, before the closing quote; names hold no quotes)?"""

    def __init__(self) -> None:
        self.tail = ""

    def push(self, piece: str) -> None:
        self.tail = (self.tail + piece)[-96:]

    @property
    def inside(self) -> bool:
        start = self.tail.rfind(EXECUTOR_KEY)
        return start >= 0 and '"' not in self.tail[start + len(EXECUTOR_KEY) :]


def executor_token_mask(tokenizer: Any, completion_ids: Sequence[int]) -> list[int]:
    """1 for each completion token that spells a step's executor name, 0 for the others."""
    tracker = ExecutorNameTracker()
    mask = []
    for token in completion_ids:
        mask.append(int(tracker.inside))
        tracker.push(tokenizer.decode([token]))
    return mask


class SchemaConstraint:
    """A transformers logits processor that lets only tokens the JSON schema allows next
    (llguidance's matcher; the mask costs well under a millisecond per token). One schema per
    row of the batch (GRPO samples a group of rows per prompt); one instance per generate call.

    `executor_scale` multiplies the logits of the tokens that spell a step's executor name
    (inside `"executor":"..."`), and only those: exploration aimed at the one choice a warm
    start collapses (docs/BENCHMARKS.md, "GRPO against SFT"). transformers applies custom
    processors before its temperature warper, so a scale of T / T_e samples the executor at
    temperature T_e and everything else at T."""

    def __init__(
        self,
        schemas: dict[str, Any] | Sequence[dict[str, Any]],
        tokenizer: Any,
        vocab_size: int,
        prompt_len: int,
        executor_scale: float = 1.0,
    ):
        import llguidance
        import llguidance.numpy
        import torch

        if isinstance(schemas, dict):
            schemas = [schemas]
        lltokenizer = _lltokenizer(tokenizer, vocab_size)
        self.matchers = []
        for schema in schemas:
            matcher = _schema_matcher(lltokenizer, schema)
            if matcher.is_error():
                raise ValueError(f"plan schema does not compile: {matcher.get_error()}")
            self.matchers.append(matcher)
        self.prompt_len = prompt_len  # of the (left-padded) prompts: generation starts after it
        self.end_token = tokenizer.eos_token_id
        self.bitmask = llguidance.numpy.allocate_token_bitmask(len(schemas), vocab_size)
        self.bits = torch.arange(32, dtype=torch.int32)
        self.executor_scale = executor_scale
        self.tokenizer = tokenizer
        self.trackers = [ExecutorNameTracker() for _ in schemas]

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import llguidance.numpy
        import torch

        if input_ids.shape[0] != len(self.matchers):
            raise ValueError(
                f"SchemaConstraint has {len(self.matchers)} schemas for {input_ids.shape[0]} rows"
            )
        for row, matcher in enumerate(self.matchers):
            # A finished row gets padding from generate, which its matcher must not see.
            if input_ids.shape[1] > self.prompt_len and not matcher.is_stopped():
                token = int(input_ids[row, -1])
                matcher.consume_token(token)
                if self.executor_scale != 1.0:
                    self.trackers[row].push(self.tokenizer.decode([token]))
            if matcher.is_error():  # cannot happen while this processor masks every step
                raise RuntimeError(f"structured decoding left the schema: {matcher.get_error()}")
            llguidance.numpy.fill_next_token_bitmask(matcher, self.bitmask, row)
        words = torch.from_numpy(self.bitmask).unsqueeze(-1)  # rows x words x 1
        allowed = ((words >> self.bits) & 1).flatten(1).bool()[:, : scores.shape[-1]]
        for row, matcher in enumerate(self.matchers):
            if matcher.is_stopped():  # the plan is complete: the row ends (or has ended)
                allowed[row] = False
                allowed[row, self.end_token] = True
            elif self.executor_scale != 1.0 and self.trackers[row].inside:
                scores[row] = scores[row] * self.executor_scale
        return scores.masked_fill(~allowed, float("-inf"))


def schema_accepts(tokenizer: Any, schema: dict[str, Any], ids: Sequence[int]) -> bool:
    """Whether the tokens `ids` spell a complete answer that `schema` allows, as the
    constrained decoder would have let them through."""
    matcher = _schema_matcher(_lltokenizer(tokenizer, len(tokenizer)), schema)
    return not matcher.is_error() and matcher.consume_tokens(list(ids)) and matcher.is_accepting()


def _schema_matcher(lltokenizer: Any, schema: dict[str, Any]) -> Any:
    """llguidance's matcher for `schema` in the compact JSON form (check `is_error()`)."""
    import llguidance

    grammar = llguidance.LLMatcher.grammar_from_json_schema(
        json.dumps(schema), overrides=COMPACT_JSON
    )
    return llguidance.LLMatcher(lltokenizer, grammar, log_level=0)


_TOKENIZERS: dict[tuple[int, int], Any] = {}


def _lltokenizer(tokenizer: Any, vocab_size: int) -> Any:
    """llguidance's view of a Hugging Face tokenizer (about a second to build: cached)."""
    import llguidance.hf

    key = (id(tokenizer), vocab_size)
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size)
    return _TOKENIZERS[key]
