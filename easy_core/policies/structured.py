"""Structured decoding of the orchestrator's plan: the JSON schema a grammar-constrained decoder
enforces (sent to vLLM or llama.cpp by the openai backend, compiled by llguidance for the
in-process hf backend).

A generic schema can name the pool's executors and the task's subtasks, but not the rule that
breaks most plans of a small model: "a step must not depend on itself (or on a later step)".
Given the task and the milestone, `plan_schema` also writes that rule as a schema: each step is
one of the task's subtasks under the id convention the policy is trained on (`m{k}-{subtask}`,
the teacher's), and its `depends_on` may name only steps of earlier milestones and this
milestone's steps for subtasks that come before it in the task's dependency order. Self-loops
and cycles then cannot be decoded; duplicate ids and dependencies on steps the plan never
writes still can (the validator catches them). On a task's first turn the schema also asks for
at least one step: with no result yet, a final answer can only be made up (the SFT model's one
remaining failure on held-out sim tasks was such an answer, a digit repeated to the token cap).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import networkx as nx

from easy_core.schemas import Milestone, Plan, Task

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


def plan_schema(
    executors: Sequence[str] | None = None,
    subtasks: Sequence[str] | None = None,
    *,
    task: Task | None = None,
    milestone: int | None = None,
    earlier_steps: Sequence[str] = (),
    max_steps: int | None = None,
    must_plan: bool = False,
) -> dict[str, Any]:
    """The Plan's JSON schema. With the pool's executor names and the task's subtask ids, those
    become enums; with `task` and `milestone` too, steps follow the DAG rule of the module doc.
    `must_plan` (a task's first turn: no result exists to answer from) asks for at least one
    step and no final answer."""
    schema = Plan.model_json_schema()
    step = schema["$defs"]["Step"]["properties"]
    if executors:
        step["executor"] = {"type": "string", "enum": sorted(executors)}
    if subtasks:
        step["covers"] = {
            "anyOf": [
                {"type": "array", "items": {"type": "string", "enum": list(subtasks)}},
                {"type": "null"},
            ]
        }
    if task is not None and milestone is not None and task.subtasks:
        variants = []
        before: list[str] = list(earlier_steps)
        for sub_id in dependency_order(task):
            own = step_id(milestone, sub_id)
            # items stated even when none may appear: llama.cpp's converter ignores a bare maxItems
            allowed = {"type": "string", "enum": list(before)} if before else {"type": "string"}
            depends_on = {"type": "array", "items": allowed}
            if not before:
                depends_on["maxItems"] = 0
            variants.append(
                {
                    "type": "object",
                    "properties": {**step, "id": {"const": own}, "depends_on": depends_on},
                    "required": ["id", "executor", "instruction", "depends_on", "covers"],
                    "additionalProperties": False,
                }
            )
            before.append(own)
        steps = schema["properties"]["steps"]
        steps["items"] = {"anyOf": variants}
        if max_steps is not None:
            steps["maxItems"] = max_steps
    if must_plan:
        schema["properties"]["steps"]["minItems"] = 1
        schema["properties"]["final_answer"] = {"type": "null"}
        schema["required"] = ["milestone", "steps", "final_answer"]
    return schema


def turn_schema(
    task: Task, executors: Sequence[str], milestones: Sequence[Milestone], max_steps: int
) -> dict[str, Any]:
    """The schema of the plan that follows `milestones`: the pool's executors, the task's
    subtasks, steps that may depend only on earlier milestones' steps and on steps before them
    in this one, and on a first turn at least one step."""
    return plan_schema(
        executors,
        [sub.id for sub in task.subtasks] or None,
        task=task,
        milestone=len(milestones) + 1,
        earlier_steps=[step.id for m in milestones for step in m.plan.steps],
        max_steps=max_steps,
        must_plan=not milestones,
    )


class SchemaConstraint:
    """A transformers logits processor that lets only tokens the JSON schema allows next
    (llguidance's matcher; the mask costs well under a millisecond per token). One schema per
    row of the batch (GRPO samples a group of rows per prompt); one instance per generate call."""

    def __init__(
        self,
        schemas: dict[str, Any] | Sequence[dict[str, Any]],
        tokenizer: Any,
        vocab_size: int,
        prompt_len: int,
    ):
        import llguidance
        import llguidance.numpy
        import torch

        if isinstance(schemas, dict):
            schemas = [schemas]
        lltokenizer = _lltokenizer(tokenizer, vocab_size)
        self.matchers = []
        for schema in schemas:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                json.dumps(schema), overrides=COMPACT_JSON
            )
            matcher = llguidance.LLMatcher(lltokenizer, grammar, log_level=0)
            if matcher.is_error():
                raise ValueError(f"plan schema does not compile: {matcher.get_error()}")
            self.matchers.append(matcher)
        self.prompt_len = prompt_len  # of the (left-padded) prompts: generation starts after it
        self.end_token = tokenizer.eos_token_id
        self.bitmask = llguidance.numpy.allocate_token_bitmask(len(schemas), vocab_size)
        self.bits = torch.arange(32, dtype=torch.int32)

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
                matcher.consume_token(int(input_ids[row, -1]))
            if matcher.is_error():  # cannot happen while this processor masks every step
                raise RuntimeError(f"structured decoding left the schema: {matcher.get_error()}")
            llguidance.numpy.fill_next_token_bitmask(matcher, self.bitmask, row)
        words = torch.from_numpy(self.bitmask).unsqueeze(-1)  # rows x words x 1
        allowed = ((words >> self.bits) & 1).flatten(1).bool()[:, : scores.shape[-1]]
        for row, matcher in enumerate(self.matchers):
            if matcher.is_stopped():  # the plan is complete: the row ends (or has ended)
                allowed[row] = False
                allowed[row, self.end_token] = True
        return scores.masked_fill(~allowed, float("-inf"))


_TOKENIZERS: dict[tuple[int, int], Any] = {}


def _lltokenizer(tokenizer: Any, vocab_size: int) -> Any:
    """llguidance's view of a Hugging Face tokenizer (about a second to build: cached)."""
    import llguidance.hf

    key = (id(tokenizer), vocab_size)
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size)
    return _TOKENIZERS[key]
