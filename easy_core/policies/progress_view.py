"""How far along an episode is: a multi-view task progress score.

Four views of the same state, each cheap to compute from what a policy can see (the task's
subtasks, the results so far with their self-checks, the executors' profiles):

- `regime`: the coarse outcome regime, 0 nothing done yet, 1 some subtasks lack a result,
  2 every subtask has a result but some are doubted by their self-check, 3 all done and trusted;
- `completion`: the expected share of subtasks solved, each result weighted by the posterior
  probability that it is correct;
- `trend`: the change in completion over the last milestone;
- `quality`: the mean posterior correctness of the results there are (how trustworthy the state
  is, regardless of how much is done).

`score` is the probability that the task is solved if it were answered now (the product of the
posteriors). The posterior of a result combines the executor's prior success on the subtask with
its self-check, whose reliability the profile states (Bayes' rule on a binary signal).
"""

from __future__ import annotations

from dataclasses import dataclass

from easy_core.core.capability import shifted_success
from easy_core.core.schemas import ExecutorProfile, StepResult, Subtask, Task

REGIMES = ("start", "partial", "doubted", "trusted")


def posterior_correct(prior: float, self_check: bool | None, reliability: float) -> float:
    """P(result correct | its self-check), for a check that is right with `reliability`."""
    if self_check is None:
        return prior
    agree, disagree = (reliability, 1.0 - reliability)
    if self_check:
        num, other = prior * agree, (1.0 - prior) * disagree
    else:
        num, other = prior * disagree, (1.0 - prior) * agree
    total = num + other
    return num / total if total > 0 else prior


def prior_success(profile: ExecutorProfile, subtask: Subtask, slope: float) -> float:
    capability = profile.capability.get(subtask.skill)
    return shifted_success(capability.success if capability else 0.0, subtask.difficulty, slope)


@dataclass(frozen=True, slots=True)
class ProgressView:
    regime: int
    completion: float
    trend: float
    quality: float
    score: float

    @property
    def regime_name(self) -> str:
        return REGIMES[self.regime]


def subtask_posteriors(
    task: Task,
    latest: dict[str, StepResult],
    profiles: dict[str, ExecutorProfile],
    slope: float,
) -> dict[str, float]:
    """Posterior correctness of the newest ok result of each subtask that has one."""
    posteriors = {}
    for sub in task.subtasks:
        result = latest.get(sub.id)
        if result is None:
            continue
        profile = profiles.get(result.executor)
        if profile is None:  # an executor outside the pool: trust only its self-check
            posteriors[sub.id] = 0.5 if result.self_check is None else float(result.self_check)
            continue
        posteriors[sub.id] = posterior_correct(
            prior_success(profile, sub, slope), result.self_check, profile.self_check_reliability
        )
    return posteriors


def progress_view(
    task: Task,
    latest: dict[str, StepResult],
    profiles: dict[str, ExecutorProfile],
    slope: float,
    previous_completion: float = 0.0,
) -> ProgressView:
    """The four views (and the score) of a state where `latest` maps each subtask to its newest
    ok result."""
    n = len(task.subtasks)
    if n == 0:
        return ProgressView(0, 0.0, 0.0, 0.0, 0.0)
    posteriors = subtask_posteriors(task, latest, profiles, slope)
    completion = sum(posteriors.values()) / n
    quality = sum(posteriors.values()) / len(posteriors) if posteriors else 0.0
    score = 1.0
    for sub in task.subtasks:
        score *= posteriors.get(sub.id, 0.0)
    if not posteriors:
        regime = 0
    elif len(posteriors) < n:
        regime = 1
    elif any(latest[sub_id].self_check is False for sub_id in posteriors):
        regime = 2
    else:
        regime = 3
    return ProgressView(regime, completion, completion - previous_completion, quality, score)
