"""The multi-component reward (docs/ARCHITECTURE.md, "Contracts"); every component is kept
separately.

  r = w_correct * correct + w_efficiency * efficiency + w_completeness * completeness

efficiency   = 1 - (cost_share * min(1, cost / budget_usd)
                    + (1 - cost_share) * min(1, makespan / budget_s))
completeness = 0.5 * (ended with a final answer) + 0.5 * (share of planned steps that ran ok)
               - 0.25 per repaired invalid turn, within [0, 1]
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from pathlib import Path

from easy_core.core.params import RewardParams
from easy_core.core.schemas import RewardBreakdown, RunMetrics, Trajectory
from easy_core.core.storage import atomic_write_text


def efficiency(metrics: RunMetrics, budget_usd: float, budget_s: float, cost_share: float) -> float:
    cost = min(1.0, metrics.cost_usd / budget_usd)
    time = min(1.0, metrics.makespan_s / budget_s)
    return 1.0 - (cost_share * cost + (1.0 - cost_share) * time)


def completeness(metrics: RunMetrics, terminated: bool, repairs: int) -> float:
    if metrics.n_steps:
        ran = (metrics.n_steps - metrics.n_failed - metrics.n_skipped) / metrics.n_steps
    else:
        ran = 1.0 if terminated else 0.0
    score = 0.5 * terminated + 0.5 * ran - 0.25 * repairs
    return min(1.0, max(0.0, score))


def reward(
    correct: bool,
    metrics: RunMetrics,
    *,
    budget_usd: float,
    budget_s: float,
    terminated: bool,
    repairs: int,
    params: RewardParams,
) -> RewardBreakdown:
    eff = efficiency(metrics, budget_usd, budget_s, params.cost_share)
    comp = completeness(metrics, terminated, repairs)
    total = params.w_correct * correct + params.w_efficiency * eff + params.w_completeness * comp
    return RewardBreakdown(correct=float(correct), efficiency=eff, completeness=comp, total=total)


REWARD_COLUMNS = [
    "task_id",
    "policy",
    "pool",
    "correct",
    "efficiency",
    "completeness",
    "total",
    "cost_usd",
    "makespan_s",
    "tokens",
    "milestones",
    "end_reason",
]


def reward_rows(trajectories: Iterable[Trajectory]) -> list[dict[str, object]]:
    """One row per episode with every reward component and what it was computed from."""
    return [
        {
            "task_id": t.task_id,
            "policy": t.policy,
            "pool": t.pool,
            "correct": t.reward.correct,
            "efficiency": t.reward.efficiency,
            "completeness": t.reward.completeness,
            "total": t.reward.total,
            "cost_usd": t.metrics.cost_usd,
            "makespan_s": t.metrics.makespan_s,
            "tokens": t.metrics.tokens,
            "milestones": t.metrics.n_milestones,
            "end_reason": t.end_reason,
        }
        for t in trajectories
    ]


def reward_summary(rows: list[dict[str, object]]) -> dict[str, float | int]:
    n = len(rows)
    summary: dict[str, float | int] = {"episodes": n}
    for column in ("correct", "efficiency", "completeness", "total", "cost_usd", "makespan_s"):
        summary[f"mean_{column}"] = sum(float(r[column]) for r in rows) / n if n else 0.0  # type: ignore[arg-type]
    return summary


def write_reward_table(path: str | Path, rows: list[dict[str, object]]) -> Path:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=REWARD_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return atomic_write_text(path, buffer.getvalue())
