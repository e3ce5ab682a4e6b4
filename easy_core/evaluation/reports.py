"""Result tables as markdown, for docs/BENCHMARKS.md and Prefect artifacts."""

from __future__ import annotations

from easy_core.core.schemas import EvalMetrics


def metrics_markdown(rows: list[EvalMetrics]) -> str:
    lines = [
        "| pool | policy | mode | n | success | 95% CI | cost $ | makespan s | tokens | reward |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in rows:
        lines.append(
            f"| {m.pool} | {m.policy} | {'sequential' if m.sequential else 'parallel'} | {m.n} | "
            f"{m.success_rate:.3f} | {m.success_ci95[0]:.3f}-{m.success_ci95[1]:.3f} | "
            f"{m.mean_cost_usd:.5f} | {m.mean_makespan_s:.2f} | {m.mean_tokens:.0f} | "
            f"{m.mean_reward:.3f} |"
        )
    return "\n".join(lines) + "\n"
