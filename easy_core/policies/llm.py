"""The `easy` policy: an LLM orchestrator. Each turn it reads the task, the executor cards and
the milestone history (`prompting.render_messages`) and writes one JSON plan, which the runtime
parses and validates (an invalid answer gets one repair turn with the error, then ends the
episode with a completeness penalty; never a crash).

Backends (params.orchestrator):
- `hf`: the model in process with transformers (CPU default: the SFT checkpoint of the packaged
  SmolLM2-135M-Instruct), greedy or sampled decoding;
- `openai`: any OpenAI-compatible server (vLLM, llama.cpp's server) serving the checkpoint.
With `structured: true` (the default) decoding follows the turn's plan schema
(`structured.plan_schema`: the pool's executors, the task's subtasks, steps that cannot depend on
themselves): in process through llguidance, on a server as `response_format`, which vLLM (guided
decoding) and llama.cpp (grammar) enforce.
Generated tokens are counted in the episode's `orchestrator_tokens`.
"""

from __future__ import annotations

import os
import zlib
from typing import Any

from easy_core.errors import ConfigError
from easy_core.params import OrchestratorParams, Params
from easy_core.policies.base import EpisodeState
from easy_core.policies.structured import SchemaConstraint, plan_schema, turn_schema
from easy_core.prompting import render_messages


def generate_hf(
    messages: list[dict[str, str]],
    settings: OrchestratorParams,
    sample_key: str = "",
    schema: dict[str, Any] | None = None,
) -> tuple[str, int]:
    """Greedy decoding, or sampling seeded by `sample_key` (so a rollout branch is repeatable)
    when the temperature is above 0; with `settings.structured` and a schema, only tokens the
    schema allows (llguidance)."""
    import torch

    from easy_core.training.models import load_causal_lm

    model, tokenizer = load_causal_lm(settings.model, settings.threads)
    encoded = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    constraint = []
    if settings.structured and schema is not None:
        prompt_len = encoded["input_ids"].shape[1]
        constraint = [SchemaConstraint(schema, tokenizer, model.config.vocab_size, prompt_len)]
    sample = settings.temperature > 0
    if sample:
        torch.manual_seed(zlib.crc32(sample_key.encode()))
    with torch.inference_mode():
        output = model.generate(
            **encoded,
            max_new_tokens=settings.max_new_tokens,
            do_sample=sample,
            temperature=settings.temperature if sample else None,
            top_p=None,
            top_k=None,
            pad_token_id=tokenizer.pad_token_id,
            logits_processor=constraint or None,
        )
    new = output[0, encoded["input_ids"].shape[1] :]
    return tokenizer.decode(new, skip_special_tokens=True), int(new.shape[0])


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


class LLMPolicy:
    name = "easy"

    def prepare(self, params: Params) -> None:
        """In process: load the model now (a missing checkpoint is a ConfigError)."""
        if params.orchestrator.backend == "hf":
            from easy_core.training.models import load_causal_lm

            load_causal_lm(params.orchestrator.model, params.orchestrator.threads)

    async def act(self, state: EpisodeState) -> str:
        settings = state.params.orchestrator
        messages = render_messages(
            state.task, state.pool.profiles, state.milestones, state.repair_error
        )
        schema = turn_schema(
            state.task,
            list(state.pool.executors),
            state.milestones,
            state.params.limits.max_steps_per_plan,
        )
        if settings.backend == "hf":
            key = f"{state.seed}|{state.task.id}|{state.scratch.get('branch', '')}|"
            text, tokens = generate_hf(messages, settings, key + str(len(state.milestones)), schema)
        else:
            text, tokens = generate_openai(messages, settings, schema)
        state.scratch["orchestrator_tokens"] = state.scratch.get("orchestrator_tokens", 0) + tokens
        return text
