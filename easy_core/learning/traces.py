"""Execution traces: one row per (step, subtask it covers) with the signals every engine records
(executor, tokens in and out, latency, cost, outcome, retries, the step's position in its plan's
DAG) and the decision-time features of `policies.features`, so the learned policies (`progress`,
`graph`) train offline from them. Stored as parquet.

Rows come from trajectories, which the local and the Prefect engines both produce, so a trace
can be taken from any run. `correct` and `inputs_correct` need gold sub-answers: sim suite only.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import networkx as nx

from easy_core.core.errors import ConfigError
from easy_core.core.params import Params
from easy_core.core.schemas import ExecutorProfile, Milestone, StepResult, Task, Trajectory
from easy_core.policies.features import FEATURES, SubtaskHistory, candidate_features, update_history
from easy_core.policies.progress_view import progress_view

TRACE_COLUMNS = (
    "task_id",
    "family",
    "policy",
    "pool",
    "seed",
    "milestone",
    "step_id",
    "executor",
    "subtask",
    "skill",
    "status",
    "correct",
    "inputs_correct",
    "self_check",
    "tokens_in",
    "tokens_out",
    "latency_s",
    "cost_usd",
    "started_s",
    "finished_s",
    "attempts",
    "n_faults",
    "depth",
    "n_deps",
    "n_children",
    "n_descendants",
    "on_critical_path",
    "plan_steps",
    "deps",
) + FEATURES


def dag_positions(milestone: Milestone) -> dict[str, tuple[int, int, int, int, bool]]:
    """Per step: depth in the plan's DAG, direct dependencies and dependents inside the plan,
    descendants, and whether it lies on the plan's longest latency chain."""
    graph = nx.DiGraph()
    ids = {step.id for step in milestone.plan.steps}
    for step in milestone.plan.steps:
        graph.add_node(step.id)
        graph.add_edges_from((dep, step.id) for dep in step.depends_on if dep in ids)
    latency = {r.step_id: r.latency_s for r in milestone.results}
    depth: dict[str, int] = {}
    finish: dict[str, float] = {}
    for node in nx.topological_sort(graph):
        preds = list(graph.predecessors(node))
        depth[node] = 1 + max((depth[p] for p in preds), default=-1)
        finish[node] = latency.get(node, 0.0) + max((finish[p] for p in preds), default=0.0)
    critical: set[str] = set()
    node = max(finish, key=finish.__getitem__, default=None)
    while node is not None:
        critical.add(node)
        preds = list(graph.predecessors(node))
        node = max(preds, key=finish.__getitem__) if preds else None
    return {
        n: (
            depth[n],
            graph.in_degree(n),
            graph.out_degree(n),
            len(nx.descendants(graph, n)),
            n in critical,
        )
        for n in graph
    }


def episode_rows(
    trajectory: Trajectory, task: Task, profiles: dict[str, ExecutorProfile], slope: float
) -> list[dict[str, Any]]:
    subtasks = task.subtask_index
    latest: dict[str, StepResult] = {}
    history: dict[str, SubtaskHistory] = {}
    results: dict[str, StepResult] = {}
    previous_completion = 0.0
    rows = []
    missing = [math.nan] * len(FEATURES)
    for milestone in trajectory.milestones:
        view = progress_view(task, latest, profiles, slope, previous_completion)
        positions = dag_positions(milestone)
        results.update((r.step_id, r) for r in milestone.results)
        for step, result in zip(milestone.plan.steps, milestone.results, strict=True):
            available: dict[str, str] = {}
            for dep in step.depends_on:
                available.update(results[dep].sub_answers if dep in results else {})
            depth, n_deps, n_children, n_desc, critical = positions[step.id]
            for sub_id in result.covers or [""]:
                sub = subtasks.get(sub_id)
                profile = profiles.get(result.executor)
                features = (
                    candidate_features(profile, sub, slope, history.get(sub_id), view)
                    if sub is not None and profile is not None
                    else missing
                )
                rows.append(
                    {
                        "task_id": task.id,
                        "family": task.family,
                        "policy": trajectory.policy,
                        "pool": trajectory.pool,
                        "seed": trajectory.seed,
                        "milestone": milestone.index,
                        "step_id": step.id,
                        "executor": result.executor,
                        "subtask": sub_id,
                        "skill": sub.skill if sub else "",
                        "status": result.status,
                        "correct": bool(
                            sub
                            and result.status == "ok"
                            and result.sub_answers.get(sub_id) == sub.gold
                        ),
                        "inputs_correct": bool(sub)
                        and all(available.get(p) == subtasks[p].gold for p in sub.depends_on),
                        "self_check": result.self_check,
                        "tokens_in": result.tokens_in,
                        "tokens_out": result.tokens_out,
                        "latency_s": result.latency_s,
                        "cost_usd": result.cost_usd,
                        "started_s": result.started_s,
                        "finished_s": result.finished_s,
                        "attempts": result.attempts,
                        "n_faults": len(result.faults),
                        "depth": depth,
                        "n_deps": n_deps,
                        "n_children": n_children,
                        "n_descendants": n_desc,
                        "on_critical_path": critical,
                        "plan_steps": len(milestone.plan.steps),
                        "deps": list(sub.depends_on) if sub else [],
                        "sub_input_tokens": sub.input_tokens if sub else 0,
                        "sub_output_tokens": sub.output_tokens if sub else 0,
                        "difficulty_level": sub.difficulty if sub else 0,
                        **dict(zip(FEATURES, features, strict=True)),
                    }
                )
        for result in milestone.results:
            if result.status == "skipped":
                continue
            for sub_id in result.covers:
                if sub_id not in subtasks:
                    continue
                trusted = result.status == "ok" and result.self_check is not False
                update_history(
                    history.setdefault(sub_id, SubtaskHistory()),
                    result.executor,
                    trusted,
                    profiles,
                    subtasks[sub_id],
                    slope,
                )
                if result.status == "ok":
                    latest[sub_id] = result
        previous_completion = view.completion
    return rows


def collect_traces(
    params: Params,
    pool_path: str | Path,
    policies: Sequence[str],
    n: int,
    seed: int = 0,
    split: str = "train",
) -> list[dict[str, Any]]:
    """Run each policy on the same `n` tasks and return their trace rows."""
    from easy_core.executors.pool import load_pool
    from easy_core.policies.batch import run_episodes
    from easy_core.runtime.episode import EpisodeRunner
    from easy_core.world.suites import get_suite

    suite = get_suite("sim", params)
    pool = load_pool(pool_path, params)
    profiles = {p.name: p for p in pool.profiles}
    tasks = list(suite.tasks(split, n, seed))
    runner = EpisodeRunner(pool, params, suite.check)
    slope = params.capability.difficulty_slope
    rows: list[dict[str, Any]] = []
    for policy in policies:
        for task, trajectory in zip(tasks, run_episodes(tasks, runner, policy, seed), strict=True):
            rows.extend(episode_rows(trajectory, task, profiles, slope))
    return rows


def write_traces(path: str | Path, rows: Iterable[dict[str, Any]]) -> Path:
    """Write rows as parquet, atomically (a killed run leaves the old file or none)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(list(rows))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_traces(path: str | Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"trace file {path} not found; write one with `easy traces --out {path}`")
    table = pq.read_table(path)
    absent = [c for c in FEATURES + ("correct", "inputs_correct") if c not in table.column_names]
    if absent:
        raise ConfigError(f"trace file {path} lacks columns {absent}; regenerate it")
    return table.to_pylist()
