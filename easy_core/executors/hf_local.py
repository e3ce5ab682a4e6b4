"""The `hf` backend: a transformers model in this process (SmolLM2-135M-Instruct or Gemma-3-270M
from their packages, or a checkpoint folder), greedy decoding on the CPU.

Steps that arrive together (independent steps of one plan) are generated as one left-padded
batch: one forward pass per token for the whole batch instead of one per step. Generation runs in
a worker thread so the event loop keeps scheduling; one batch at a time per model.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from easy_core.core.schemas import ExecutorProfile, StepRequest, StepResult, approx_tokens
from easy_core.executors.base import step_result
from easy_core.executors.hf_settings import HFSettings
from easy_core.executors.openai_http import render_step, shared_prefix


@dataclass
class _Pending:
    request: StepRequest
    prompt: str
    future: asyncio.Future[tuple[str, int, int, float]]


def render_prompt(tokenizer: Any, request: StepRequest) -> str:
    """The chat template where the model has one (instruct models), else a plain completion
    prompt (base models such as Gemma-3-270M)."""
    system, user = shared_prefix(request), render_step(request)
    if getattr(tokenizer, "chat_template", None):
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return f"{system}\n\nStep: {user}\nResult:"


class HFExecutor:
    wall_clock = True  # waits on real work: episodes using it run in wall time

    def __init__(self, profile: ExecutorProfile, settings: HFSettings | None = None):
        from easy_core.executors.hf_models import load_causal_lm

        self.profile = profile
        self.settings = settings or HFSettings()
        self.model, self.tokenizer = load_causal_lm(profile.model or "", self.settings.threads)
        self._pending: list[_Pending] = []
        self._flush: asyncio.TimerHandle | None = None
        self._busy: asyncio.Lock | None = None

    async def run(self, request: StepRequest) -> StepResult:
        loop = asyncio.get_running_loop()
        if self._busy is None:
            self._busy = asyncio.Lock()
        pending = _Pending(request, render_prompt(self.tokenizer, request), loop.create_future())
        self._pending.append(pending)
        if len(self._pending) >= self.settings.batch_size:
            self._start_batch()
        elif self._flush is None:
            self._flush = loop.call_later(self.settings.batch_window_s, self._start_batch)
        try:
            text, tokens_in, tokens_out, latency = await pending.future
        except Exception as exc:  # a generation error fails the step, never the episode
            return step_result(
                self.profile, request, status="failed", error=f"{type(exc).__name__}: {exc}"
            )
        return step_result(
            self.profile,
            request,
            output=text,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            latency_s=latency,
        )

    def _start_batch(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        batch = [p for p in self._pending[: self.settings.batch_size] if not p.future.done()]
        del self._pending[: self.settings.batch_size]
        if batch:
            asyncio.ensure_future(self._generate_batch(batch))
        if self._pending:
            self._flush = asyncio.get_running_loop().call_later(
                self.settings.batch_window_s, self._start_batch
            )

    async def _generate_batch(self, batch: list[_Pending]) -> None:
        assert self._busy is not None
        async with self._busy:
            started = time.monotonic()
            caps = [self.output_token_cap(p.request) for p in batch]
            try:
                outputs = await asyncio.to_thread(self.generate, [p.prompt for p in batch], caps)
            except Exception as exc:
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(exc)
                return
            latency = time.monotonic() - started
            for p, (text, tokens_in, tokens_out) in zip(batch, outputs, strict=True):
                if not p.future.done():
                    p.future.set_result((text, tokens_in, tokens_out, latency))

    def generate(self, prompts: list[str], caps: list[int]) -> list[tuple[str, int, int]]:
        """Greedy completions of `prompts`, each cut at its own token cap: (text, tokens in,
        tokens out) per prompt."""
        import torch

        tokenizer = self.tokenizer
        tokenizer.padding_side = "left"
        encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.inference_mode():
            generated = self.model.generate(
                **encoded,
                max_new_tokens=max(caps),
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
            )
        width = encoded["input_ids"].shape[1]
        results = []
        for row, cap in enumerate(caps):
            new = generated[row, width : width + cap].tolist()
            if tokenizer.eos_token_id in new:
                new = new[: new.index(tokenizer.eos_token_id)]
            text = tokenizer.decode(new, skip_special_tokens=True).strip()
            tokens_in = int(encoded["attention_mask"][row].sum())
            results.append((text, tokens_in, len(new)))
        return results

    def estimate_input_tokens(self, request: StepRequest) -> int:
        return int(approx_tokens(shared_prefix(request) + render_step(request)) * 1.5) + 32

    def output_token_cap(self, request: StepRequest) -> int:
        return min(request.max_output_tokens, self.profile.max_output_tokens)
