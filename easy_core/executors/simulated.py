"""The `sim` backend: an executor whose step is scored by the simulated world
(`world.sim_world`) on the latent subtasks it covers; it calls no model.
"""

from __future__ import annotations

from easy_core.core.schemas import ExecutorProfile, StepRequest, StepResult, approx_tokens
from easy_core.executors.base import run_simulated
from easy_core.world.sim_world import SimWorld


class SimExecutor:
    """A sim executor waits its modelled latency on the event loop's clock: instantly on the
    virtual-time loop, for real on a normal loop (wall time, scaled by
    `sim.time_scale`)."""

    def __init__(
        self, profile: ExecutorProfile, world: SimWorld, truth: ExecutorProfile | None = None
    ):
        self.profile = profile  # the card: what the runtime and the policies read
        self.world = world
        # what the world draws outcomes and latencies from: the pool file's own values, which
        # a measured card only estimates
        self.truth = truth or profile

    def simulate(self, request: StepRequest) -> StepResult:
        """The step's result at once; `latency_s` is how long it would take."""
        result = self.world.simulate(self.truth, request)
        scale = self.world.sim.time_scale
        if scale != 1.0:  # the world run faster than modelled (load tests of a served pool)
            result.latency_s *= scale
        return result

    async def run(self, request: StepRequest) -> StepResult:
        return await run_simulated(self.simulate, request)

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
