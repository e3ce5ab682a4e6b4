"""Plots a person would rather see than read: the cost-success Pareto frontier."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from easy_core.core.schemas import EvalMetrics


def pareto_frontier(points: list[tuple[float, float]]) -> list[int]:
    """Indexes of the points no other point beats (lower or equal cost, higher or equal
    success, one of them strictly), ordered by cost."""
    frontier = []
    for i, (cost, success) in enumerate(points):
        dominated = any(
            c <= cost and s >= success and (c < cost or s > success)
            for j, (c, s) in enumerate(points)
            if j != i
        )
        if not dominated:
            frontier.append(i)
    return sorted(frontier, key=lambda i: points[i][0])


AXES = {
    "cost": ("mean_cost_usd", "mean cost per task (USD, log)", True),
    "makespan": ("mean_makespan_s", "mean makespan per task (s)", False),
}


def pareto_plot(
    rows: list[EvalMetrics], path: str | Path, title: str, against: str = "cost"
) -> Path:
    """Success against cost (log scale) or makespan, one panel per pool, frontier drawn
    through, the oracle (if present) as a dotted bound."""
    field, axis_label, log = AXES[against]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pools = sorted({row.pool for row in rows})
    fig, axes = plt.subplots(1, len(pools), figsize=(5.5 * len(pools), 4.2), squeeze=False)
    for ax, pool in zip(axes[0], pools, strict=True):
        mine = [row for row in rows if row.pool == pool]
        points = [(max(getattr(r, field), 1e-9), r.success_rate) for r in mine]
        for row, (x, success) in zip(mine, points, strict=True):
            low, high = row.success_ci95
            ax.errorbar(x, success, yerr=[[success - low], [high - success]], fmt="o", capsize=3)
            label = row.policy + (" (seq)" if row.sequential else "")
            ax.annotate(label, (x, success), textcoords="offset points", xytext=(5, 4))
        frontier = pareto_frontier(points)
        ax.plot([points[i][0] for i in frontier], [points[i][1] for i in frontier], "--", alpha=0.6)
        for row in mine:
            if row.policy == "oracle" and not row.sequential:
                ax.axhline(row.success_rate, linestyle=":", color="grey", label="oracle bound")
        if log:
            ax.set_xscale("log")
        ax.set_xlabel(axis_label)
        ax.set_ylabel("success rate")
        ax.set_ylim(0, 1)
        ax.set_title(pool)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    return save_figure(fig, path)


def save_figure(fig: Any, path: str | Path) -> Path:
    """Write a matplotlib figure as PNG atomically and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
    return path


def calibration_plot(points: list[tuple[str, float, float]], path: str | Path, title: str) -> Path:
    """Measured against simulated success, one labelled point per (executor/domain, sim,
    measured), with the diagonal of perfect calibration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1)
    for label, simulated, measured in points:
        ax.scatter(simulated, measured)
        ax.annotate(
            label, (simulated, measured), fontsize=7, xytext=(3, 3), textcoords="offset points"
        )
    ax.set_xlabel("simulated success (measured profile replayed)")
    ax.set_ylabel("measured success (held-out tasks)")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.set_title(title)
    return save_figure(fig, path)
