"""Offline training of the learned policies: traces of the sim suite (training split) ->
the `progress` predictor and the `graph` dispatcher, written where params.policies points."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from easy_core.core.params import Params
from easy_core.core.storage import write_json
from easy_core.learning.traces import collect_traces, read_traces, write_traces

LEARNED_POLICIES = ("progress", "graph")


def train_policies(
    params: Params,
    which: tuple[str, ...] = LEARNED_POLICIES,
    traces_path: str | Path = "data/traces/traces.parquet",
    report_path: str | Path | None = "results/policies.json",
    reuse_traces: bool = False,
) -> dict[str, Any]:
    """Collect (or reuse) the traces, fit each learned policy, save it; returns the report:
    held-out log loss of each predictor against the profiles' own claims, and timings."""
    tp = params.policy_training
    started = time.perf_counter()
    if reuse_traces and Path(traces_path).is_file():
        rows = read_traces(traces_path)
    else:
        explorer = params.policies.model_copy(
            update={"greedy_threshold": tp.trace_greedy_threshold}
        )
        tracing = params.model_copy(update={"policies": explorer})
        rows = collect_traces(tracing, tp.pool, tp.trace_policies, tp.n_tasks, tp.seed)
        write_traces(traces_path, rows)
    report: dict[str, Any] = {"trace_rows": len(rows), "traces_s": time.perf_counter() - started}
    if "progress" in which:
        from easy_core.policies.progress import train_progress_predictor

        t0 = time.perf_counter()
        predictor, figures = train_progress_predictor(rows, tp)
        predictor.save(params.policies.progress_model)
        report["progress"] = {**figures, "train_s": time.perf_counter() - t0}
    if "graph" in which:
        from easy_core.policies.graph import save_dispatcher, train_graph_dispatcher

        t0 = time.perf_counter()
        model, figures = train_graph_dispatcher(rows, tp)
        save_dispatcher(model, params.policies.graph_model)
        report["graph"] = {**figures, "train_s": time.perf_counter() - t0}
    if report_path is not None:
        write_json(report_path, report)
    return report
