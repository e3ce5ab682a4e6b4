"""Policies: given the episode so far, the next milestone and its plan."""

from __future__ import annotations

from easy_core.errors import ConfigError
from easy_core.policies.base import EpisodeState, Policy
from easy_core.policies.baselines import BASELINES

POLICIES = dict(BASELINES)


def get_policy(name: str) -> Policy:
    factory = POLICIES.get(name)
    if factory is None:
        raise ConfigError(f"unknown policy {name!r}; available: {', '.join(sorted(POLICIES))}")
    return factory()


__all__ = ["POLICIES", "EpisodeState", "Policy", "get_policy"]
