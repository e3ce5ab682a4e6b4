"""The `sim` backend: a profile-driven, deterministic simulator of executors (DESIGN.md,
"Simulated world"). It calls no model; it scores a step on the latent subtasks it covers.

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

import asyncio

from easy_core.core.schemas import ExecutorProfile, StepRequest, StepResult, approx_tokens
from easy_core.world.sim_world import SimWorld


class SimExecutor:
    """A sim executor waits its modelled latency on the event loop's clock: instantly on the
    virtual-time loop, for real on a normal loop (wall time)."""

    def __init__(self, profile: ExecutorProfile, world: SimWorld):
        self.profile = profile
        self.world = world

    def simulate(self, request: StepRequest) -> StepResult:
        """The step's result at once; `latency_s` is how long it would take."""
        return self.world.simulate(self.profile, request)

    async def run(self, request: StepRequest) -> StepResult:
        result = self.world.simulate(self.profile, request)
        if result.latency_s > 0:
            await asyncio.sleep(result.latency_s)
        return result

    def estimate_input_tokens(self, request: StepRequest) -> int:
        index = request.task.subtask_index
        tokens = approx_tokens(request.instruction)
        for sub_id in request.covers:
            tokens += index[sub_id].input_tokens
        for result in request.inputs:
            tokens += result.tokens_out
        return tokens

    def output_token_cap(self, request: StepRequest) -> int:
        if not request.covers:
            return 1
        needed = sum(
            max(1, round(request.task.subtask(sub_id).output_tokens * self.profile.verbosity))
            for sub_id in request.covers
        )
        return min(needed, request.max_output_tokens)
