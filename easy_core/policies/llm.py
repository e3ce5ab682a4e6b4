"""The `easy` policy: an LLM orchestrator. Each turn it reads the task, the executor cards and
the milestone history (`prompting.render_messages`) and writes one JSON plan, which the runtime
parses and validates (an invalid answer gets one repair turn with the error, then ends the
episode with a completeness penalty; never a crash).

Backends (params.orchestrator):
- `hf`: the model in process with transformers (CPU default: the SFT checkpoint of the packaged
  SmolLM2-135M-Instruct), greedy or sampled decoding;
- `openai`: any OpenAI-compatible server (vLLM, llama.cpp's server) serving the checkpoint; with
  `structured: true` the request carries the plan's JSON schema as `response_format`, which vLLM
  (guided decoding) and llama.cpp (grammar) enforce while decoding.
Generated tokens are counted in the episode's `orchestrator_tokens`.
"""

from __future__ import annotations

import os
import zlib
from typing import Any

from easy_core.errors import ConfigError
from easy_core.params import OrchestratorParams, Params
from easy_core.policies.base import EpisodeState
from easy_core.prompting import render_messages
from easy_core.schemas import Plan


def plan_schema(
    executors: list[str] | None = None, subtasks: list[str] | None = None
) -> dict[str, Any]:
    """The Plan's JSON schema; with the pool's executor names (and the task's subtask ids) as
    enums, so a grammar-constrained decoder cannot name an executor that does not exist."""
    schema = Plan.model_json_schema()
    step = schema["$defs"]["Step"]["properties"]
    if executors:
        step["executor"] = {"type": "string", "enum": sorted(executors)}
    if subtasks:
        step["covers"] = {
            "anyOf": [
                {"type": "array", "items": {"type": "string", "enum": subtasks}},
                {"type": "null"},
            ]
        }
    return schema


def generate_hf(
    messages: list[dict[str, str]], settings: OrchestratorParams, sample_key: str = ""
) -> tuple[str, int]:
    """Greedy decoding, or sampling seeded by `sample_key` (so a rollout branch is repeatable)
    when the temperature is above 0."""
    import torch

    from easy_core.training.models import load_causal_lm

    model, tokenizer = load_causal_lm(settings.model, settings.threads)
    encoded = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
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
        if settings.backend == "hf":
            key = f"{state.seed}|{state.task.id}|{state.scratch.get('branch', '')}|"
            text, tokens = generate_hf(messages, settings, key + str(len(state.milestones)))
        else:
            schema = plan_schema(
                list(state.pool.executors), [sub.id for sub in state.task.subtasks] or None
            )
            text, tokens = generate_openai(messages, settings, schema)
        state.scratch["orchestrator_tokens"] = state.scratch.get("orchestrator_tokens", 0) + tokens
        return text
