"""Policies: given the episode so far, the next milestone and its plan."""

from __future__ import annotations

from collections.abc import Callable

from easy_core.core.errors import ConfigError
from easy_core.policies.baselines import BASELINES, GreedyOncePolicy
from easy_core.policies.sampled import SampledGreedyPolicy
from easy_core.runtime.policy import EpisodeState, Policy


def _progress() -> Policy:
    from easy_core.policies.progress import ProgressPolicy

    return ProgressPolicy()


def _graph() -> Policy:  # imports torch: only when asked for
    from easy_core.policies.graph import GraphPolicy

    return GraphPolicy()


def _program() -> Policy:
    from easy_core.policies.program_aided import ProgramAidedPolicy

    return ProgramAidedPolicy()


def _llm() -> Policy:
    from easy_core.policies.llm import LLMPolicy

    return LLMPolicy()


POLICIES: dict[str, Callable[[], Policy]] = {
    **BASELINES,
    "progress": _progress,
    "graph": _graph,
    "easy": _llm,
    "greedy-sample": SampledGreedyPolicy,
    "greedy-once": GreedyOncePolicy,
    "program": _program,
}
LEARNED = ("progress", "graph")


def get_policy(name: str) -> Policy:
    factory = POLICIES.get(name)
    if factory is None:
        raise ConfigError(f"unknown policy {name!r}; available: {', '.join(sorted(POLICIES))}")
    return factory()


__all__ = ["LEARNED", "POLICIES", "EpisodeState", "Policy", "get_policy"]
