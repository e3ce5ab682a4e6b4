"""The cost/quality frontier over several suites at once: every policy of some finished runs (the
episodes `easy compare` kept in DIR/episodes/POLICY, live or replayed), one panel per suite. A
policy's quality is its success, or the graded score a suite is judged by (a compound task's
share of parts right, where no policy solves a task whole), with its 95% interval; its cost is
the ratio of its total cost to a reference policy's (always the strongest executor, say) on
the very tasks it played, with its bootstrap interval. The target region (at least the
reference's quality at no more than a share of its cost) is drawn, so a reader sees at once
which policy, if any, is in it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from easy_core.core.errors import ConfigError
from easy_core.core.schemas import Trajectory
from easy_core.core.stats import mean, mean_interval, ratio_of_sums, wilson_interval
from easy_core.evaluation.paired_runs import episodes_by_task
from easy_core.evaluation.plots import save_figure


@dataclass(frozen=True)
class FrontierPoint:
    suite: str
    policy: str
    pool: str
    n: int
    measure: str  # "success" or the graded score's name
    value: float
    value_ci95: tuple[float, float]
    reference_value: float  # the reference's quality on the same tasks
    reference_pool: str  # the pool of the reference run it is measured against
    mean_cost_usd: float
    cost_ratio: float  # total cost / the reference's on the same tasks (same pool if run there)
    cost_ratio_ci95: tuple[float, float]


def _policy_runs(run_dirs: list[Path]) -> list[dict[str, Trajectory]]:
    runs = []
    for run_dir in run_dirs:
        folder = run_dir / "episodes"
        if not folder.is_dir():
            raise ConfigError(
                f"{run_dir}: no episodes/ folder; give a folder `easy compare --out` wrote"
            )
        runs += [episodes_by_task(policy) for policy in sorted(folder.iterdir()) if policy.is_dir()]
    return runs


def _reference(
    suite: str, runs: list[dict[str, Trajectory]], reference: str, run: dict[str, Trajectory]
) -> dict[str, Trajectory]:
    """The reference policy's run that `run` is measured against: one that played all its
    tasks, on the same pool where there is one (a live run against the live reference), else
    the largest."""
    mine = [r for r in runs if next(iter(r.values())).policy == reference and set(run) <= set(r)]
    if not mine:
        raise ConfigError(
            f"suite {suite}: no run of the reference policy {reference!r} played every task "
            f"{next(iter(run.values())).policy} played; add a run folder with "
            f"episodes/{reference} on the same --split and at least the same --n, or pick "
            "another --reference"
        )
    pool = next(iter(run.values())).pool
    return max(mine, key=lambda r: (next(iter(r.values())).pool == pool, len(r)))


def _quality(episodes: list[Trajectory], score: str | None) -> tuple[float, tuple[float, float]]:
    if score is None:
        wins = sum(episode.correct for episode in episodes)
        return wins / len(episodes), wilson_interval(wins, len(episodes))
    missing = [episode.task_id for episode in episodes if score not in episode.scores]
    if missing:
        raise ConfigError(
            f"episodes of {episodes[0].policy} have no graded score {score!r} (task "
            f"{missing[0]}); --score names one of the suite's scores, e.g. parts"
        )
    return mean_interval([episode.scores[score] for episode in episodes])


def suite_frontier(
    runs: dict[str, list[Path]], reference: str = "strongest", scores: dict[str, str] | None = None
) -> list[FrontierPoint]:
    """One point per (suite, run, policy) in `runs` (suite -> run folders); `scores` maps a
    suite to the graded score it is judged by instead of success."""
    scores = scores or {}
    unknown = sorted(set(scores) - set(runs))
    if unknown:
        raise ConfigError(f"--score names suites with no --run: {unknown}")
    points = []
    for suite, run_dirs in runs.items():
        policy_runs = _policy_runs(run_dirs)
        drawn = set()
        for run in policy_runs:
            base = _reference(suite, policy_runs, reference, run)
            tasks = sorted(run)
            episodes = [run[task] for task in tasks]
            # a policy run again beside another (the baselines of a checkpoint's run) is one point
            key = (episodes[0].policy, episodes[0].pool, tuple(tasks))
            if key in drawn:
                continue
            drawn.add(key)
            value, value_ci = _quality(episodes, scores.get(suite))
            reference_value, _ = _quality([base[task] for task in tasks], scores.get(suite))
            costs = [episode.metrics.cost_usd for episode in episodes]
            base_costs = [base[task].metrics.cost_usd for task in tasks]
            ratio, ratio_ci = (
                ratio_of_sums(costs, base_costs) if sum(base_costs) > 0 else (0.0, (0.0, 0.0))
            )
            points.append(
                FrontierPoint(
                    suite=suite,
                    policy=episodes[0].policy,
                    pool=episodes[0].pool,
                    n=len(episodes),
                    measure=scores.get(suite, "success"),
                    value=value,
                    value_ci95=value_ci,
                    reference_value=reference_value,
                    reference_pool=next(iter(base.values())).pool,
                    mean_cost_usd=mean(costs),
                    cost_ratio=ratio,
                    cost_ratio_ci95=ratio_ci,
                )
            )
    return points


def _reference_value(points: list[FrontierPoint], suite: str, reference: str) -> float:
    mine = [p for p in points if p.suite == suite and p.policy == reference]
    return max(mine, key=lambda p: p.n).value


def frontier_markdown(points: list[FrontierPoint], reference: str, target_cost: float) -> str:
    lines = [
        f"| suite | policy | pool | n | measure | value (95% CI) | {reference}'s on these tasks "
        f"| cost / {reference}'s (95% CI) | in the target |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        # at least the reference's quality, at no more than the target share of its cost; a
        # policy that gets nothing right is not in it, even where the reference gets nothing
        inside = p.value > 0 and p.value >= p.reference_value and p.cost_ratio <= target_cost
        lines.append(
            f"| {p.suite} | {p.policy} | {p.pool} | {p.n} | {p.measure} | {p.value:.3f} "
            f"({p.value_ci95[0]:.3f}-{p.value_ci95[1]:.3f}) | {p.reference_value:.3f} "
            f"({p.reference_pool}) | {p.cost_ratio:.3f} "
            f"({p.cost_ratio_ci95[0]:.3f}-{p.cost_ratio_ci95[1]:.3f}) | "
            f"{'yes' if inside else ''} |"
        )
    return "\n".join(lines) + "\n"


def frontier_json(points: list[FrontierPoint]) -> list[dict[str, Any]]:
    return [asdict(point) for point in points]


def frontier_plot(
    points: list[FrontierPoint], path: str | Path, reference: str, target_cost: float
) -> Path:
    """One panel per suite: quality against cost relative to the reference, both intervals
    drawn, replayed runs as circles and live ones as squares, the target region shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    suites = list(dict.fromkeys(p.suite for p in points))
    fig, axes = plt.subplots(1, len(suites), figsize=(4.6 * len(suites), 4.4), squeeze=False)
    for ax, suite in zip(axes[0], suites, strict=True):
        mine = [p for p in points if p.suite == suite]
        top = _reference_value(points, suite, reference)
        right = max(1.15, *(p.cost_ratio_ci95[1] * 1.05 for p in mine))
        ax.axvspan(0, target_cost, ymin=top, ymax=1, color="tab:green", alpha=0.12)
        ax.axhline(top, color="grey", linestyle=":", linewidth=1)
        # policies with the same outcome (every card-reading rule on one rung, say) share a point
        shared: dict[tuple[float, float, str, int], list[FrontierPoint]] = {}
        for p in mine:
            shared.setdefault((round(p.cost_ratio, 4), round(p.value, 4), p.pool, p.n), []).append(
                p
            )
        for same in shared.values():
            p = same[0]
            replayed = p.pool.endswith("-replay")
            ax.errorbar(
                p.cost_ratio,
                p.value,
                xerr=[[p.cost_ratio - p.cost_ratio_ci95[0]], [p.cost_ratio_ci95[1] - p.cost_ratio]],
                yerr=[[p.value - p.value_ci95[0]], [p.value_ci95[1] - p.value]],
                fmt="o" if replayed else "s",
                capsize=2,
                alpha=0.85,
            )
            names = ", ".join(q.policy for q in same)
            label = f"{names}{'' if replayed else ' live'} (n={p.n})"
            left = p.cost_ratio > 0.6 * right  # keep long labels inside the panel
            ax.annotate(
                label,
                (p.cost_ratio, p.value),
                fontsize=7,
                xytext=(-4 if left else 4, 3),
                textcoords="offset points",
                ha="right" if left else "left",
            )
        ax.set_xlim(0, right)
        ax.set_ylim(0, 1)
        ax.set_xlabel(f"cost / {reference}'s on the same tasks")
        measure = mine[0].measure
        ax.set_ylabel("success rate" if measure == "success" else f"graded score: {measure}")
        ax.set_title(suite)
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"Quality against cost; shaded: at least {reference}'s quality at <= "
        f"{target_cost:.0%} of its cost"
    )
    return save_figure(fig, path)
