"""Two finished evaluations of the same tasks, compared task by task: the episodes `easy compare`
or `easy eval` kept (their `episodes/<policy>` folders), which may come from different pools or
backends (a live run against the replayed baselines of its recording, say). Success, cost and
reward of each; the paired difference in success, in reward and in each graded score both runs
have (a compound task's share of parts right), each with its 95% bootstrap interval; and the
ratio of total cost with its interval, tasks resampled together."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from easy_core.core.datasets import read_trajectories
from easy_core.core.errors import ConfigError
from easy_core.core.schemas import Trajectory
from easy_core.core.stats import mean, paired_difference, ratio_of_sums, wilson_interval


def episodes_by_task(directory: str | Path) -> dict[str, Trajectory]:
    # `easy compare` keeps a policy's episodes as a sharded dataset in episodes/POLICY/shards
    if (Path(directory) / "shards").is_dir():
        directory = Path(directory) / "shards"
    episodes = {episode.task_id: episode for episode in read_trajectories(directory)}
    if not episodes:
        raise ConfigError(f"{directory}: no episodes; run `easy compare --out DIR` first")
    return episodes


def _summary(label: str, episodes: list[Trajectory]) -> dict[str, Any]:
    wins = sum(episode.correct for episode in episodes)
    return {
        "label": label,
        "policy": episodes[0].policy,
        "pool": episodes[0].pool,
        "n": len(episodes),
        "success": wins / len(episodes),
        "success_ci95": wilson_interval(wins, len(episodes)),
        "mean_cost_usd": mean([episode.metrics.cost_usd for episode in episodes]),
        "mean_reward": mean([episode.reward.total for episode in episodes]),
    }


def compare_paired_runs(reference: str | Path, other: str | Path) -> dict[str, Any]:
    """`other` against `reference` on the tasks both played (both must have played the same
    ones: a run over other tasks is not a paired comparison)."""
    ours, theirs = episodes_by_task(other), episodes_by_task(reference)
    if set(ours) != set(theirs):
        only_ours = sorted(set(ours) - set(theirs))[:3]
        only_theirs = sorted(set(theirs) - set(ours))[:3]
        raise ConfigError(
            f"{other} and {reference} played different tasks (only in the first: {only_ours}, "
            f"only in the second: {only_theirs}); run both on the same suite, --split and --n"
        )
    tasks = sorted(ours)
    a = [theirs[task] for task in tasks]
    b = [ours[task] for task in tasks]
    success, success_ci = paired_difference(
        [float(e.correct) for e in a], [float(e.correct) for e in b]
    )
    reward, reward_ci = paired_difference([e.reward.total for e in a], [e.reward.total for e in b])
    figures: dict[str, Any] = {
        "reference": _summary(str(reference), a),
        "other": _summary(str(other), b),
        "success_difference": success,
        "success_difference_ci95": success_ci,
        "reward_difference": reward,
        "reward_difference_ci95": reward_ci,
    }
    # a suite's graded scores (a compound task's share of parts right, say), where both have them
    for name in sorted(set.intersection(*({*e.scores} for e in a + b))):
        score, score_ci = paired_difference(
            [e.scores[name] for e in a], [e.scores[name] for e in b]
        )
        figures[f"score_{name}_difference"], figures[f"score_{name}_difference_ci95"] = (
            score,
            score_ci,
        )
    if sum(e.metrics.cost_usd for e in a) > 0:
        ratio, ratio_ci = ratio_of_sums(
            [e.metrics.cost_usd for e in b], [e.metrics.cost_usd for e in a]
        )
        figures["cost_ratio"], figures["cost_ratio_ci95"] = ratio, ratio_ci
    return figures


def paired_runs_markdown(figures: dict[str, Any]) -> str:
    lines = [
        "| run | policy | pool | n | success | 95% CI | mean cost $ | reward |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key in ("reference", "other"):
        row = figures[key]
        low, high = row["success_ci95"]
        lines.append(
            f"| {key} | {row['policy']} | {row['pool']} | {row['n']} | {row['success']:.3f} | "
            f"{low:.3f}-{high:.3f} | {row['mean_cost_usd']:.6f} | {row['mean_reward']:.3f} |"
        )

    def interval(name: str) -> str:
        low, high = figures[f"{name}_ci95"]
        return f"{figures[name]:+.3f} ({low:+.3f}..{high:+.3f})"

    lines += [
        "",
        f"success, other - reference: {interval('success_difference')}",
        f"reward, other - reference: {interval('reward_difference')}",
    ]
    for name in figures:
        if name.startswith("score_") and name.endswith("_difference"):
            lines.append(f"{name[6:-11]}, other - reference: {interval(name)}")
    if "cost_ratio" in figures:
        low, high = figures["cost_ratio_ci95"]
        lines.append(
            f"cost, other / reference: {figures['cost_ratio']:.3f} ({low:.3f}..{high:.3f})"
        )
    return "\n".join(lines) + "\n"
