"""Comparing policies on the same held-out tasks and seeds: the table, the Pareto plots, and the
reference targets (strongest's success for less of its cost; the oracle's success within a few
points)."""

from __future__ import annotations

from pathlib import Path

from easy_core.core.params import Params
from easy_core.core.schemas import EvalMetrics
from easy_core.core.storage import atomic_write_text, write_json
from easy_core.evaluation.evaluator import EvalSpec, evaluate, evaluate_resumable
from easy_core.evaluation.reports import metrics_markdown
from easy_core.executors.pool import load_pool_config


def compare(
    params: Params,
    suite: str,
    pool: str | Path,
    policies: list[str],
    n: int,
    seed: int,
    split: str = "test",
    episodes_dir: str | Path | None = None,
) -> list[EvalMetrics]:
    """`split`: `validation` to choose weights and thresholds, `test` to report them.
    `episodes_dir`: each policy's episodes are written there as they finish
    (`<policy>/shards`, eval.shard_size a shard), for paired analysis, and a comparison run
    again reuses every finished shard (a long live run goes on where it stopped)."""
    known = suite == "sim" or all(
        p.backend == "replay" for p in load_pool_config(pool).executors
    )  # where outcomes are known, the oracle joins as the bound
    wanted = list(dict.fromkeys(policies + (["oracle"] if known else [])))
    specs = [EvalSpec(suite, policy, pool, n, seed, split) for policy in wanted]
    if episodes_dir is None:
        return [evaluate(spec, params)[0] for spec in specs]
    return [evaluate_resumable(spec, params, Path(episodes_dir) / spec.policy)[0] for spec in specs]


def targets_markdown(rows: list[EvalMetrics]) -> str:
    """Each policy against `strongest` (success for a share of its cost) and the `oracle`
    (success gap for a multiple of its cost)."""
    by_policy = {row.policy: row for row in rows}
    strongest, oracle = by_policy.get("strongest"), by_policy.get("oracle")
    lines = [
        "| policy | success | cost / strongest's | success - strongest's | success - oracle's "
        "| cost / oracle's |",
        "|---|---|---|---|---|---|",
    ]

    def ratio(a: float, b: float | None) -> str:
        return f"{a / b:.2f}" if b else "-"

    def gap(a: float, b: float | None) -> str:
        return f"{a - b:+.3f}" if b is not None else "-"

    for row in rows:
        lines.append(
            f"| {row.policy} | {row.success_rate:.3f} | "
            f"{ratio(row.mean_cost_usd, strongest.mean_cost_usd if strongest else None)} | "
            f"{gap(row.success_rate, strongest.success_rate if strongest else None)} | "
            f"{gap(row.success_rate, oracle.success_rate if oracle else None)} | "
            f"{ratio(row.mean_cost_usd, oracle.mean_cost_usd if oracle else None)} |"
        )
    return "\n".join(lines) + "\n"


def write_comparison(out_dir: str | Path, rows: list[EvalMetrics], title: str) -> list[Path]:
    from easy_core.evaluation.plots import pareto_plot

    out = Path(out_dir)
    write_json(
        out / "compare.json", {f"{r.pool}/{r.policy}": r.model_dump(mode="json") for r in rows}
    )
    references = f"## Against the references\n\n{targets_markdown(rows)}"
    atomic_write_text(out / "compare.md", f"# {title}\n\n{metrics_markdown(rows)}\n{references}")
    return [
        pareto_plot(rows, out / "pareto-cost.png", title, against="cost"),
        pareto_plot(rows, out / "pareto-makespan.png", title, against="makespan"),
    ]
