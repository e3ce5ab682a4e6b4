"""`greedy-sample`: `greedy` with exploration, a stochastic policy for tree rollouts on the sim
suite without an LLM. Each subtask keeps greedy's executor with probability 1 - epsilon, else
takes one drawn uniformly from the pool. The draw is seeded by the episode seed, the task, the
rollout branch (`state.scratch["branch"]`, set by tree rollouts), the milestone and the subtask:
two branches of one tree decide differently, the same branch twice decides the same."""

from __future__ import annotations

import random
from collections.abc import Callable

from easy_core.core.schemas import Subtask
from easy_core.policies.baselines import GreedyPolicy
from easy_core.runtime.policy import EpisodeState

EPSILON = 0.3


class SampledGreedyPolicy(GreedyPolicy):
    name = "greedy-sample"
    epsilon = EPSILON

    def chooser(self, state: EpisodeState) -> Callable[[Subtask], str]:
        branch = state.scratch.get("branch", "")
        milestone = len(state.milestones)
        names = [p.name for p in state.pool.profiles]

        def choose(sub: Subtask) -> str:
            rng = random.Random(f"{state.seed}|{state.task.id}|{branch}|{milestone}|{sub.id}")
            if rng.random() < self.epsilon:
                return rng.choice(names)
            return self.choose(state, sub)

        return choose
