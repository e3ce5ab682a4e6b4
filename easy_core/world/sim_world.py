"""The simulated world (docs/ARCHITECTURE.md, "Contracts"): the outcome, tokens and latency of an
executor on latent subtasks, a pure function of (seed, task, subtask, executor) and the
executor's profile. Only the `sim` executor and the oracle read it.

Outcome of a step on subtask t, for executor e and episode seed s:
  p = expected_success(e, skill(t), difficulty(t))
      * missing_context_penalty ** (prerequisites of t whose results are not in the step's context)
      * multi_cover_factor ** (subtasks this step already did before t)
  correct(t) = hardness(s, task, t, e) < p  and every prerequisite result in context is correct
`hardness` is uniform on (0, 1) and correlated across executors (hard instances are hard for
every model), so a stronger executor is more likely, not certain, to succeed where a weaker one
failed. Everything is a pure function of (seed, task, covered subtasks, executor).
"""

from __future__ import annotations

import hashlib
import math
from statistics import NormalDist

from easy_core.core.capability import expected_success, shifted_success
from easy_core.core.params import CapabilityParams, SimParams
from easy_core.core.schemas import (
    ExecutorProfile,
    StepRequest,
    StepResult,
    Subtask,
    Task,
    approx_tokens,
)

_SQRT2 = math.sqrt(2.0)
_NORMAL = NormalDist()


def unit_hash(key: str) -> float:
    """A deterministic uniform number in (0, 1) from a string key."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / 2.0**64


def wrong_answer(seed: int, task_id: str, subtask_id: str, executor: str, gold: str) -> str:
    """A wrong sub-answer that looks exactly like a right one: the gold's own format (each
    digit a digit, each lowercase hex or letter of the same kind, the rest kept) and length,
    drawn from a hash of (seed, task, subtask, executor), never equal to the gold. Nothing in
    it tells a policy that it is wrong; only the self-check speaks of correctness."""
    digest = hashlib.blake2b(
        f"wrong|{seed}|{task_id}|{subtask_id}|{executor}".encode(), digest_size=32
    ).digest()
    hex_gold = all(c in _HEX for c in gold) and any(c in "abcdef" for c in gold)
    chars = []
    for i, c in enumerate(gold):
        byte = digest[i % len(digest)] ^ (i // len(digest))
        if hex_gold:
            chars.append(_HEX[byte % 16])
        elif c.isdigit():
            chars.append(str(byte % 10))
        elif c.islower():
            chars.append(chr(ord("a") + byte % 26))
        elif c.isupper():
            chars.append(chr(ord("A") + byte % 26))
        else:
            chars.append(c)
    answer = "".join(chars)
    if answer == gold:  # one chance in the alphabet size to the power of the length
        answer = _next_symbol(gold[0], hex_gold) + gold[1:] if gold else "?"
    return answer


_HEX = "0123456789abcdef"


def _next_symbol(c: str, hex_gold: bool) -> str:
    if hex_gold:
        return _HEX[(_HEX.index(c) + 1) % 16]
    if c.isdigit():
        return str((int(c) + 1) % 10)
    if c.isalpha():
        base = ord("a") if c.islower() else ord("A")
        return chr(base + (ord(c) - base + 1) % 26)
    return "?" if c != "?" else "!"


def unit_hash_pair(key: str) -> tuple[float, float]:
    """Two independent deterministic uniforms in (0, 1) from one string key."""
    digest = hashlib.blake2b(key.encode(), digest_size=16).digest()
    return (
        (int.from_bytes(digest[:8], "big") + 0.5) / 2.0**64,
        (int.from_bytes(digest[8:], "big") + 0.5) / 2.0**64,
    )


class SimWorld:
    """The rules of the simulated world, shared by every sim executor and the oracle."""

    def __init__(self, sim: SimParams | None = None, capability: CapabilityParams | None = None):
        self.sim = sim or SimParams()
        self.capability = capability or CapabilityParams()
        self._shared = math.sqrt(self.sim.shared_hardness)
        self._own = math.sqrt(1.0 - self.sim.shared_hardness)
        self._salt = f"o{self.sim.outcome_seed}:" if self.sim.outcome_seed else ""

    def hardness(self, seed: int, task_id: str, subtask_id: str, executor: str) -> float:
        if self._salt:
            seed = f"{self._salt}{seed}"  # type: ignore[assignment]
        z_shared = _NORMAL.inv_cdf(unit_hash(f"{seed}|{task_id}|{subtask_id}"))
        z_own = _NORMAL.inv_cdf(unit_hash(f"{seed}|{task_id}|{subtask_id}|{executor}"))
        z = self._shared * z_shared + self._own * z_own
        return 0.5 * (1.0 + math.erf(z / _SQRT2))  # standard normal CDF

    def success_probability(self, profile: ExecutorProfile, subtask: Subtask) -> float:
        return expected_success(
            profile, subtask.skill, subtask.difficulty, self.capability.difficulty_slope
        )

    def would_succeed(
        self, seed: int, task: Task, subtask: Subtask, profile: ExecutorProfile
    ) -> bool:
        """Outcome of `profile` on `subtask` alone, with all prerequisite results correct and in
        context: what the oracle may know."""
        return self.hardness(seed, task.id, subtask.id, profile.name) < self.success_probability(
            profile, subtask
        )

    def simulate(self, profile: ExecutorProfile, request: StepRequest) -> StepResult:
        """Score the step; `latency_s` is the modelled latency the caller waits for."""
        task = request.task
        seed = request.seed
        index = task.subtask_index
        covers = request.covers
        covered = [index[sub_id] for sub_id in covers]
        window = profile.context_window
        tokens_in = approx_tokens(request.instruction) + sum(s.input_tokens for s in covered)
        if tokens_in > window:
            return StepResult(
                step_id=request.step_id,
                executor=profile.name,
                status="failed",
                error=f"context window exceeded: {tokens_in} > {window} tokens",
                covers=list(covers),
            )
        # Context from dependencies is packed in order; what does not fit is lost.
        available: dict[str, str] = {}
        for result in request.inputs:
            if tokens_in + result.tokens_out <= window:
                tokens_in += result.tokens_out
                available.update(result.sub_answers)

        sim = self.sim
        slope = self.capability.difficulty_slope
        capability = profile.capability
        answers: dict[str, str] = {}
        all_correct = bool(covered)
        tokens_out = 0
        for position, sub in enumerate(covered):
            skill = capability.get(sub.skill)
            p = shifted_success(skill.success if skill else 0.0, sub.difficulty, slope)
            inputs_correct = True
            missing = 0
            for prereq in sub.depends_on:
                answer = available.get(prereq)
                if answer is None:
                    missing += 1
                elif answer != index[prereq].gold:
                    inputs_correct = False
            if missing:
                p *= sim.missing_context_penalty**missing
            if position:
                p *= sim.multi_cover_factor**position
            ok = inputs_correct and self.hardness(seed, task.id, sub.id, profile.name) < p
            answer = sub.gold if ok else wrong_answer(seed, task.id, sub.id, profile.name, sub.gold)
            answers[sub.id] = available[sub.id] = answer
            all_correct = all_correct and ok
            tokens_out += max(1, round(sub.output_tokens * profile.verbosity))
        if not covered:
            tokens_out = 1
        if tokens_out > request.max_output_tokens:
            tokens_out = request.max_output_tokens
            all_correct = False
            answers = {}
        check_draw, latency_draw = unit_hash_pair(
            f"{seed}|{task.id}|{','.join(covers)}|{profile.name}"
        )
        self_check = all_correct if check_draw < profile.self_check_reliability else not all_correct
        sigma = sim.latency_jitter
        jitter = (
            math.exp(sigma * _NORMAL.inv_cdf(latency_draw) - sigma * sigma / 2) if sigma else 1.0
        )
        latency = profile.latency
        return StepResult(
            step_id=request.step_id,
            executor=profile.name,
            status="ok",
            # A step that covers no subtask does nothing useful, but it did answer.
            output="; ".join(f"{sub_id}={answer}" for sub_id, answer in answers.items())
            if covered
            else "(no subtask)",
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            cost_usd=(tokens_in * profile.price_in_per_1m + tokens_out * profile.price_out_per_1m)
            / 1e6,
            latency_s=jitter
            * (
                latency.ttft_s
                + tokens_in / latency.prefill_tokens_per_s
                + tokens_out / latency.tokens_per_s
            ),
            self_check=self_check if covered else None,
            covers=list(covers),
            sub_answers=answers,
        )
