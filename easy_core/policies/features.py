"""Features of one candidate decision, "executor e for subtask t in this state", shared by the
trace dataset (computed after the fact, for training) and the learned policies (computed at
decision time). Only what a policy can see goes in: the executor's profile, the subtask's
declared attributes, what earlier attempts at it did, and the progress views of the state."""

from __future__ import annotations

import math
from dataclasses import dataclass

from easy_core.core.schemas import ExecutorProfile, Milestone, Subtask
from easy_core.policies.progress_view import ProgressView, prior_success

FEATURES = (
    "claimed",  # the profile's success on the subtask's skill, shifted to its difficulty
    "claimed_logit",
    "difficulty",
    "log_price",  # log10 of the output price per 1M tokens
    "reliability",  # of the executor's self-check
    "n_prereqs",
    "attempt",  # earlier attempts at this subtask
    "prev_best_claimed",  # best claimed success among the executors that tried it
    "last_doubted",  # the latest attempt failed or its self-check said no
    "regime",
    "completion",
    "trend",
    "quality",
)


@dataclass(slots=True)
class SubtaskHistory:
    attempts: int = 0
    best_claimed: float = 0.0
    last_doubted: bool = False


def histories(
    milestones: list[Milestone],
    profiles: dict[str, ExecutorProfile],
    subtasks: dict[str, Subtask],
    slope: float,
) -> dict[str, SubtaskHistory]:
    """What earlier milestones did to each subtask."""
    history: dict[str, SubtaskHistory] = {}
    for milestone in milestones:
        for result in milestone.results:
            if result.status == "skipped":
                continue
            for sub_id in result.covers:
                entry = history.setdefault(sub_id, SubtaskHistory())
                update_history(
                    entry,
                    result.executor,
                    result.status == "ok" and result.self_check is not False,
                    profiles,
                    subtasks[sub_id],
                    slope,
                )
    return history


def update_history(
    entry: SubtaskHistory,
    executor: str,
    trusted: bool,
    profiles: dict[str, ExecutorProfile],
    sub: Subtask,
    slope: float,
) -> None:
    entry.attempts += 1
    profile = profiles.get(executor)
    if profile is not None:
        entry.best_claimed = max(entry.best_claimed, prior_success(profile, sub, slope))
    entry.last_doubted = not trusted


def candidate_features(
    profile: ExecutorProfile,
    sub: Subtask,
    slope: float,
    history: SubtaskHistory | None,
    view: ProgressView,
) -> list[float]:
    claimed = prior_success(profile, sub, slope)
    clipped = min(max(claimed, 1e-4), 1 - 1e-4)
    history = history or SubtaskHistory()
    return [
        claimed,
        math.log(clipped / (1.0 - clipped)),
        sub.difficulty / 5.0,
        math.log10(max(profile.price_out_per_1m, 1e-6)),
        profile.self_check_reliability,
        float(len(sub.depends_on)),
        float(history.attempts),
        history.best_claimed,
        float(history.last_doubted),
        view.regime / 3.0,
        view.completion,
        view.trend,
        view.quality,
    ]
