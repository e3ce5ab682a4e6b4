"""Stage `evaluate`: every policy on every pool, on the same held-out tasks. Writes
results/metrics.json, results/eval.md and results/pareto.png, and publishes the table and the
plot as Prefect artifacts."""

from __future__ import annotations

import json
from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact

from easy_core.core.params import EvaluateParams
from easy_core.core.schemas import EvalMetrics
from easy_core.core.storage import atomic_write_text
from easy_core.evaluation.evaluator import EvalSpec, evaluate, write_results
from easy_core.evaluation.plots import pareto_plot
from easy_core.evaluation.reports import metrics_markdown
from flows.settings import (
    load_pool_secrets,
    params_from,
    publish_image,
    publish_markdown,
    task_options,
    task_runner,
)


@task(task_run_name="eval-{policy}{label}-{pool_name}")
def evaluate_one(
    policy: str,
    pool: str,
    pool_name: str,
    n: int,
    seed: int,
    params_path: str | None,
    out: str,
    model: str | None = None,
    label: str = "",
) -> EvalMetrics:
    """`model`: the checkpoint the `easy` policy runs (the trained orchestrator), its row
    named `label`."""
    spec = EvalSpec("sim", policy, pool, n, seed, "test")
    params = params_from(params_path)
    if model is not None:
        params.orchestrator = params.orchestrator.model_copy(update={"model": model})
    metrics, trajectories = evaluate(spec, params)
    if label:
        metrics = metrics.model_copy(update={"policy": label})
    write_results(Path(out) / f"{pool_name}-{label or policy}", metrics, trajectories)
    return metrics


def run_evaluation(
    config: EvaluateParams, params_path: str | None, out_dir: str, title: str
) -> list[EvalMetrics]:
    params = params_from(params_path)
    load_pool_secrets(params)
    runs: list[tuple[str, str, int, str | None, str]] = [
        (policy, pool, config.n, None, "") for pool in config.pools for policy in config.policies
    ]
    if config.orchestrator_n:  # the orchestrator the train stage trained, on fewer tasks
        runs += [
            ("easy", pool, config.orchestrator_n, model, label)
            for pool in config.pools
            for label, model in config.orchestrator_models.items()
        ]
    progress = create_progress_artifact(0.0, key="evaluation-progress", description=title)
    one = evaluate_one.with_options(**task_options(params))
    runs_dir = f"{out_dir}/runs"
    futures = [  # on the flow's task runner: threads here, Dask workers on a cluster
        one.submit(policy, pool, Path(pool).stem, n, config.seed, params_path, runs_dir, *more)
        for policy, pool, n, *more in runs
    ]
    rows = []
    for done, future in enumerate(futures, start=1):
        rows.append(future.result())
        update_progress_artifact(progress, 100.0 * done / len(runs))
    out = Path(out_dir)
    summary = {f"{r.pool}/{r.policy}": r.model_dump(mode="json") for r in rows}
    atomic_write_text(out / "metrics.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    table = metrics_markdown(rows)
    atomic_write_text(out / "eval.md", f"# {title}\n\n{table}")
    png = pareto_plot(rows, out / "pareto.png", title)
    publish_markdown("evaluation-results", f"# {title}\n\n{table}", title)
    publish_image("evaluation-pareto", png, "cost vs success, Pareto frontier dashed")
    return rows


@flow(name="evaluate", log_prints=True, task_runner=task_runner(params_from(None)))
def evaluate_flow(
    params_path: str | None = None,
    n: int | None = None,
    policies: list[str] | None = None,
    pools: list[str] | None = None,
    out_dir: str = "results",
    orchestrator_n: int | None = None,
) -> list[EvalMetrics]:
    """The policies and the trained orchestrator on held-out sim tasks; params: evaluate. A run
    that names its `policies` evaluates those only (no orchestrator rows unless
    `orchestrator_n` is given too)."""
    config = params_from(params_path).evaluate
    if policies and orchestrator_n is None:
        orchestrator_n = 0
    overrides = {k: v for k, v in {"n": n, "policies": policies, "pools": pools}.items() if v}
    if orchestrator_n is not None:
        overrides["orchestrator_n"] = orchestrator_n
    config = config.model_copy(update=overrides)
    return run_evaluation(config, params_path, out_dir, f"evaluation on {config.n} held-out tasks")


if __name__ == "__main__":
    evaluate_flow()
