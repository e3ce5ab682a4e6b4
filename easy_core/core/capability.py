"""Expected success of an executor on a subtask of a given difficulty.

A profile measures one success rate per domain; difficulty (1-5, 3 is the domain's average)
shifts it on the logit scale. The simulated world and the cost-aware policies share this model.
"""

from __future__ import annotations

import math
from functools import lru_cache

from easy_core.core.schemas import ExecutorProfile

MID_DIFFICULTY = 3


def expected_success(profile: ExecutorProfile, skill: str, difficulty: int, slope: float) -> float:
    capability = profile.capability.get(skill)
    return shifted_success(capability.success if capability else 0.0, difficulty, slope)


@lru_cache(maxsize=4096)
def shifted_success(base: float, difficulty: int, slope: float) -> float:
    """`base` success at average difficulty, moved on the logit scale to `difficulty`."""
    if base <= 0.0 or base >= 1.0:
        return base
    logit = math.log(base / (1.0 - base)) - slope * (difficulty - MID_DIFFICULTY)
    return 1.0 / (1.0 + math.exp(-logit))
