"""The `easy` policy: an LLM orchestrator. Each turn it reads the task, the executor cards and
the milestone history (`prompting.orchestrator_messages`) and writes one JSON plan, which the
runtime parses and validates (an invalid answer gets one repair turn with the error, then ends the
episode with a completeness penalty; never a crash).

Backends (params.orchestrator):
- `hf`: the model in process with transformers (CPU default: the SFT checkpoint of the packaged
  SmolLM2-135M-Instruct), greedy or sampled decoding;
- `openai`: any OpenAI-compatible server (vLLM, llama.cpp's server) serving the checkpoint.
With `structured: true` (the default) decoding follows the turn's plan schema
(`structured.turn_schema`: the pool's executors and, on a task with declared subtasks, the
task's own dependency graph and a cited answer): in process through llguidance, on a server
as `response_format`, which vLLM (guided decoding) and llama.cpp (grammar) enforce.
Generated tokens are counted in the episode's `orchestrator_tokens`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import threading
import zlib
from typing import Any

from easy_core.core.clock import VirtualTimeLoop
from easy_core.core.errors import ConfigError, PlanParseError
from easy_core.core.params import OrchestratorParams, Params
from easy_core.core.schemas import Plan
from easy_core.plans.prompting import LEVELS, orchestrator_messages
from easy_core.plans.structured import (
    SchemaConstraint,
    plan_schema,
    turn_schema,
    without_string_rules,
)
from easy_core.plans.validation import parse_plan
from easy_core.policies.covered_questions import ask_covered_questions, has_questions
from easy_core.policies.levels import resolve_levels
from easy_core.runtime.policy import EpisodeState


def generate_hf(
    messages: list[dict[str, str]],
    settings: OrchestratorParams,
    sample_key: str = "",
    schema: dict[str, Any] | None = None,
) -> tuple[str, int]:
    """One answer in process: `generate_hf_batch` with a single conversation."""
    return generate_hf_batch([messages], settings, [schema], sample_key)[0]


def generate_hf_batch(
    conversations: list[list[dict[str, str]]],
    settings: OrchestratorParams,
    schemas: list[dict[str, Any] | None],
    sample_key: str = "",
) -> list[tuple[str, int]]:
    """One answer per conversation from one `generate` call (cheaper per row than one call
    each; the batch runs as long as its longest answer). Greedy decoding, or sampling seeded
    by `sample_key` (so a rollout branch is repeatable) when the temperature is above 0; with
    `settings.structured`, each row only takes tokens its schema allows (llguidance)."""
    import torch

    from easy_core.executors.hf_models import load_causal_lm

    model, tokenizer = load_causal_lm(settings.model, settings.threads)
    with _GENERATING:  # evaluations in threads (a flow's task runner) share the process
        if settings.temperature > 0:
            torch.manual_seed(zlib.crc32(sample_key.encode()))
        completions = generate_ids(
            model,
            tokenizer,
            [chat_prompt_ids(tokenizer, m) for m in conversations],
            schemas if settings.structured else [None] * len(schemas),
            settings.max_new_tokens,
            settings.temperature,
        )
    return [(tokenizer.decode(ids, skip_special_tokens=True), len(ids)) for ids in completions]


def chat_prompt_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)
    return list(encoded["input_ids"])


def generate_ids(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    schemas: list[dict[str, Any] | None],
    max_new_tokens: int,
    temperature: float,
    executor_temperature: float | None = None,
    copies: int = 1,
) -> list[list[int]]:
    """The completion tokens of each prompt, `copies` of them per prompt (rows in order: the
    first prompt's copies first), each up to and including its end token; the prompts are
    left-padded into one batch; rows with schemas (one per prompt, all or none) are
    constrained, and when sampling, their executor names are sampled at `executor_temperature`
    (default: the temperature). A prompt's copies share one prefill of it: K sibling samples of
    a tree node read their long prompt once, not K times."""
    import torch

    width = max(len(ids) for ids in prompts)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in prompts])
    attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompts])
    sample = temperature > 0
    scale = temperature / executor_temperature if sample and executor_temperature else 1.0
    rows = [schema for schema in schemas for _ in range(copies)]
    constraint = []
    if all(schema is not None for schema in rows):
        constraint = [SchemaConstraint(rows, tokenizer, model.config.vocab_size, width, scale)]
    with torch.no_grad():
        cache = preallocated_cache(model, width + max_new_tokens)
        if copies > 1 and width > 1:
            shared_prefill(model, input_ids[:, :-1], attention[:, :-1], copies, cache)
            input_ids = input_ids.repeat_interleave(copies, dim=0)
            attention = attention.repeat_interleave(copies, dim=0)
        output = model.generate(
            input_ids=input_ids,
            attention_mask=attention,
            cache=cache,
            max_new_tokens=max_new_tokens,
            do_sample=sample,
            temperature=temperature if sample else None,
            top_p=None,
            top_k=None,
            use_cache=True,
            pad_token_id=pad,
            logits_processor=constraint or None,
        )
    stops = model.generation_config.eos_token_id
    stops = {stops} if isinstance(stops, int) else set(stops or [tokenizer.eos_token_id])
    completions = []
    for row in output[:, width:].tolist():
        # a row that stopped before the longest one is padded after its end token
        end = next((i + 1 for i, token in enumerate(row) if token in stops), len(row))
        completions.append(row[:end])
    return completions


def preallocated_cache(model: Any, length: int) -> Any:
    """A KV cache allocated once for `length` positions and written in place: the default
    cache grows by concatenation, which copies every layer's keys and values at each decoded
    token (on CPU a large share of decoding a long prompt)."""
    from transformers import StaticCache

    return StaticCache(config=model.config, max_cache_len=length)


def shared_prefill(model: Any, input_ids: Any, attention: Any, copies: int, cache: Any) -> None:
    """Fills `cache` with the KV states of the (left-padded) prompt prefixes, each row repeated
    `copies` times, at the positions generate gives padded rows, so generate goes on from it
    as from its own prefill."""
    positions = (attention.long().cumsum(-1) - 1).masked_fill(attention == 0, 0)
    model(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=positions,
        cache=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    for layer in cache.layers:  # a preallocated layer has no batch_repeat_interleave of its own
        layer.keys = layer.keys.repeat_interleave(copies, dim=0)
        layer.values = layer.values.repeat_interleave(copies, dim=0)
        layer.batch_size *= copies


def generate_openai(
    messages: list[dict[str, str]],
    settings: OrchestratorParams,
    schema: dict[str, Any] | None = None,
) -> tuple[str, int]:
    """One completion from the server; with `settings.structured`, constrained to `schema`
    (default: the generic Plan schema)."""
    import httpx

    if not settings.endpoint:
        raise ConfigError("orchestrator.backend openai needs orchestrator.endpoint (…/v1)")
    headers = {}
    if settings.api_key_env:
        key = os.environ.get(settings.api_key_env)
        if not key:
            raise ConfigError(f"environment variable {settings.api_key_env} is not set")
        headers["Authorization"] = f"Bearer {key}"
    body: dict[str, Any] = {
        "model": settings.model,
        "messages": messages,
        "max_tokens": settings.max_new_tokens,
        "temperature": settings.temperature,
        **settings.extra_body,
    }
    schema = schema or plan_schema()
    if settings.structured and settings.schema_format == "json_object":
        schema = without_string_rules(schema)
        body["response_format"] = {"type": "json_object", "schema": schema}
    elif settings.structured:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "plan", "schema": schema},
        }
    url = settings.endpoint.rstrip("/") + "/chat/completions"
    # A blocking call, like in-process generation: the orchestrator's turn is not simulated
    # time, and a virtual-time loop would fire the client's timeouts at once.
    with httpx.Client(timeout=600) as client:
        response = client.post(url, json=body, headers=headers)
    response.raise_for_status()
    payload = response.json()
    text = payload["choices"][0]["message"]["content"] or ""
    tokens = int((payload.get("usage") or {}).get("completion_tokens") or len(text) // 4)
    return text, tokens


_GENERATING = threading.RLock()  # re-entered by a policy's turn that holds it


def _one_at_a_time(generate: Any) -> tuple[str, int]:
    """One in-process generation at a time: one set of weights on few cores."""
    with _GENERATING:
        return generate()


def _call(generate: Any) -> tuple[str, int]:  # a server batches concurrent requests itself
    return generate()


class LLMPolicy:
    name = "easy"

    def prepare(self, params: Params) -> None:
        """In process: load the model now (a missing checkpoint, or one trained on the other
        output contract, is a ConfigError)."""
        if params.orchestrator.backend == "hf":
            from easy_core.executors.hf_models import load_causal_lm, require_contract

            require_contract(params.orchestrator.model, params.orchestrator.contract())
            load_causal_lm(params.orchestrator.model, params.orchestrator.threads)

    async def act(self, state: EpisodeState) -> str:
        settings = state.params.orchestrator
        messages, schema = turn_inputs(state)
        if settings.backend == "hf":
            generate = functools.partial(generate_hf, messages, settings, sample_key(state), schema)
        else:
            generate = functools.partial(generate_openai, messages, settings, schema)
        if isinstance(asyncio.get_running_loop(), VirtualTimeLoop):
            text, tokens = generate()  # virtual time: a thread would let the clock run on
        else:  # wall time (a served endpoint): other episodes keep running while it generates
            local = settings.backend == "hf"
            text, tokens = await asyncio.to_thread(_one_at_a_time if local else _call, generate)
        return record_answer(state, text, tokens)


def turn_inputs(state: EpisodeState) -> tuple[list[dict[str, str]], dict[str, Any]]:
    """What the orchestrator reads this turn, and the schema its answer must follow."""
    executor_last = state.params.orchestrator.executor_last
    messages = orchestrator_messages(
        state.params, state.task, state.pool.profiles, state.milestones, state.repair_error
    )
    schema = turn_schema(
        state.task,
        executor_slot(state.params.orchestrator, state.pool.names),
        state.milestones,
        state.params.limits.max_steps_per_plan,
        executor_last,
    )
    return messages, schema


def executor_slot(settings: OrchestratorParams, names: list[str]) -> list[str]:
    """What a step's executor slot may hold: the pool's names, or with
    `orchestrator.executor_levels` the levels."""
    return list(LEVELS) if settings.executor_levels else list(names)


def sample_key(state: EpisodeState) -> str:
    branch = state.scratch.get("branch", "")
    return f"{state.seed}|{state.task.id}|{branch}|{len(state.milestones)}"


def record_answer(state: EpisodeState, text: str, tokens: int) -> str | Plan:
    """Counts the answer's tokens in the episode's `orchestrator_tokens`. An answer that used
    every token orchestrator.max_new_tokens allows and is not JSON was cut off: a PlanParseError
    that says so (a repair turn, then an `invalid_plan` end naming the setting to raise). With
    `orchestrator.executor_levels` the answer's levels become executors (`levels.py`); with
    `orchestrator.ask_covered_questions` a model step that covers one declared subtask asks
    that subtask's own question (`covered_questions.py`)."""
    state.scratch["orchestrator_tokens"] = state.scratch.get("orchestrator_tokens", 0) + tokens
    cap = state.params.orchestrator.max_new_tokens
    if tokens >= cap:
        try:
            json.loads(text)
        except ValueError:
            raise PlanParseError(
                f"the answer reached orchestrator.max_new_tokens ({cap}) before its JSON "
                "ended; a plan of many steps needs a larger orchestrator.max_new_tokens"
            ) from None
    settings, task, profiles = state.params.orchestrator, state.task, state.pool.profiles
    if settings.executor_levels:
        slope = state.params.capability.difficulty_slope
        plan = resolve_levels(parse_plan(text), task, profiles, slope)
    elif settings.ask_covered_questions and has_questions(task):
        plan = parse_plan(text)
    else:
        return text
    return ask_covered_questions(plan, task, profiles) if settings.ask_covered_questions else plan
