"""Recorded outcomes (RouterBench's method): every executor of a pool on every subtask of a
suite's split, with right prerequisites as its inputs, one row per (task, subtask, executor):
output, correct, tokens, latency, cost.

What "right prerequisites" are is the recording's `inputs`:
- "recorded" (the default): subtasks are recorded level by level of their task's graph, and a
  prerequisite delivers a right output an executor recorded on it (the one whose card is
  likeliest to succeed on its skill, as a careful policy would have run it), so a combining
  step reads parts as a live episode hands them on: prose, an `Answer:` line, retrieved
  documents. Where no executor got a prerequisite right, its gold answer stands in.
- "gold": RouterBench's rule, every prerequisite its bare gold answer. A combining step then
  only transcribes, and replay is optimistic about it (docs/BENCHMARKS.md).
A suite whose subtasks have no prerequisites (math, code) records the same rows either way.

Recordings are sharded by task (`<out>/<suite>-<split>/shard-NNNNN.jsonl`), each shard written
atomically with a sidecar that marks it finished under the recording's settings, so a long
recording that stops goes on where it stopped. A profile measured from the train split's
records (`profile_from_records`) gives the pool's cards; the `replay` backend
(`easy_core.executors.replay`) serves the test split's records to any policy offline.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from easy_core.core.datasets import config_hash, finished_shard_file, shard_text, store_shard_file
from easy_core.core.errors import ConfigError
from easy_core.core.schemas import (
    LatencyModel,
    MeasuredProfile,
    OutcomeRecord,
    StepResult,
    Subtask,
    Task,
    Trajectory,
)
from easy_core.core.stats import mean
from easy_core.evaluation.profiling import (
    DomainMeasurement,
    Outcome,
    informative,
    measured_profile,
    real_outcomes,
    subtask_checker,
    summarize_outcomes,
)
from easy_core.executors.pool import ExecutorPool
from easy_core.executors.replay import read_record_file, read_records
from easy_core.world.suites import Suite

SHARD_TASKS = 10  # tasks per shard: what a stopped recording can lose

Inputs = Literal["recorded", "gold"]


def recording_dir(out_dir: str | Path, suite: str, split: str) -> Path:
    return Path(out_dir) / f"{suite}-{split}"


def _settings_hash(
    pool: ExecutorPool, suite: str, split: str, seed: int, inputs: Inputs = "gold"
) -> str:
    """What determines a shard's rows: which executors (name, model, output cap), the tasks,
    and (for tasks whose subtasks have prerequisites) what the prerequisites deliver."""
    executors = [(p.name, p.model, p.max_output_tokens) for p in pool.profiles]
    settings: dict[str, object] = {
        "executors": executors,
        "suite": suite,
        "split": split,
        "seed": seed,
    }
    if inputs != "gold":
        settings["inputs"] = inputs
    return config_hash(settings)


def _depths(task: Task) -> dict[str, int]:
    """Subtask -> its level in the task's graph (0: no prerequisites)."""
    depth: dict[str, int] = {}
    for sub in task.subtasks:  # suites list a subtask after its prerequisites
        depth[sub.id] = 1 + max((depth[dep] for dep in sub.depends_on), default=-1)
    return depth


def _record_row(o: Outcome, inputs_from: dict[str, str]) -> OutcomeRecord:
    return OutcomeRecord(
        suite=o.task.suite,
        split=o.task.split,
        task_id=o.task.id,
        subtask_id=o.subtask.id,
        skill=o.subtask.skill,
        executor=o.executor,
        status=o.result.status,
        output=o.result.output,
        error=o.result.error,
        correct=o.correct,
        tokens_in=o.result.tokens_in,
        tokens_out=o.result.tokens_out,
        latency_s=round(o.result.latency_s, 4),
        cost_usd=o.result.cost_usd,
        inputs_from=inputs_from,
        informative=informative(o.task, o.subtask),
    )


def _right_output(
    pool: ExecutorPool, sub: Subtask, rows: list[OutcomeRecord]
) -> OutcomeRecord | None:
    """The right row a prerequisite hands on: of the executors that got it right, the one whose
    card is likeliest to succeed on its skill (pool order breaks ties)."""
    order = {p.name: i for i, p in enumerate(pool.profiles)}

    def card(row: OutcomeRecord) -> float:
        measured = pool.executors[row.executor].profile.capability.get(sub.skill)
        return measured.success if measured is not None else 0.0

    right = [row for row in rows if row.correct and row.status == "ok"]
    return min(right, key=lambda row: (-card(row), order[row.executor]), default=None)


def _rows(
    pool: ExecutorPool,
    suite: Suite,
    tasks: list[Task],
    seed: int,
    on_row: Callable[[], None] | None,
    at_once: int,
    inputs: Inputs = "gold",
    kept: list[OutcomeRecord] | None = None,
) -> list[OutcomeRecord]:
    """The shard's rows, level by level of each task's graph; `kept`: rows of subtasks with no
    prerequisites already recorded (the same under either `inputs`), not called again."""
    check = subtask_checker(suite.name, suite, "its outcomes cannot be recorded")
    work = [(task, check) for task in tasks]
    if inputs == "gold":
        return [
            _record_row(o, {}) for o in real_outcomes(pool, work, seed, on_row, at_once, spare=True)
        ]
    depths = {task.id: _depths(task) for task in tasks}
    top = max((d for task_depths in depths.values() for d in task_depths.values()), default=0)
    given: dict[tuple[str, str], StepResult] = {}
    given_by: dict[tuple[str, str], str] = {}
    rows: list[OutcomeRecord] = []
    for level in range(top + 1):
        todo = {(t.id, s) for t in tasks for s, d in depths[t.id].items() if d == level}
        if level == 0 and kept:
            level_rows = [r for r in kept if (r.task_id, r.subtask_id) in todo]
        else:
            outcomes = real_outcomes(pool, work, seed, on_row, at_once, given, todo, spare=True)
            level_rows = [
                _record_row(
                    o,
                    {
                        dep: given_by[o.task.id, dep]
                        for dep in o.subtask.depends_on
                        if (o.task.id, dep) in given_by
                    },
                )
                for o in outcomes
            ]
        rows += level_rows
        for task in tasks:
            for sub in task.subtasks:
                if depths[task.id][sub.id] != level:
                    continue
                mine = [r for r in level_rows if (r.task_id, r.subtask_id) == (task.id, sub.id)]
                handed = _right_output(pool, sub, mine)
                if handed is not None:
                    given[task.id, sub.id] = as_result(handed)
                    given_by[task.id, sub.id] = handed.executor
    order = {p.name: i for i, p in enumerate(pool.profiles)}
    position = {(t.id, s.id): (i, j) for i, t in enumerate(tasks) for j, s in enumerate(t.subtasks)}
    return sorted(rows, key=lambda r: (order[r.executor], position[r.task_id, r.subtask_id]))


def record(
    pool: ExecutorPool,
    suite: Suite,
    split: str,
    n: int,
    out_dir: str | Path,
    seed: int = 0,
    on_row: Callable[[], None] | None = None,
    at_once: int = 1,
    inputs: Inputs = "recorded",
) -> tuple[Path, int]:
    """Record the first `n` tasks of `split`, `at_once` executors at a time; finished shards
    (same settings, intact) are kept. A shard recorded with gold inputs keeps its rows of
    subtasks without prerequisites when recorded again with recorded ones. Returns the
    recording's folder and how many shards this call wrote."""
    directory = recording_dir(out_dir, suite.name, split)
    # a suite's tasks all have prerequisites or none do; one task says which, so a finished
    # shard is known as such without generating its tasks (a TextWorld game's are not cheap)
    first = next(iter(suite.tasks(split, 1, seed)))
    mode: Inputs = inputs if any(sub.depends_on for sub in first.subtasks) else "gold"
    settings = _settings_hash(pool, suite.name, split, seed, mode)
    gold_settings = _settings_hash(pool, suite.name, split, seed)
    written = 0
    for shard, start in enumerate(range(0, n, SHARD_TASKS)):
        if finished_shard_file(directory, shard, settings) is not None:
            continue
        kept = None
        finished_gold = finished_shard_file(directory, shard, gold_settings)
        if mode != "gold" and finished_gold is not None:
            kept = read_record_file(directory / finished_gold.path)
        tasks = list(suite.tasks(split, min(SHARD_TASKS, n - start), seed, start=start))
        rows = _rows(pool, suite, tasks, seed, on_row, at_once, mode, kept)
        store_shard_file(directory, shard, shard_text(rows), settings)
        written += 1
    return directory, written


def as_result(row: OutcomeRecord) -> StepResult:
    """A recorded row as the step result it was."""
    return StepResult(
        step_id=f"record-{row.subtask_id}",
        executor=row.executor,
        status=row.status,
        output=row.output,
        error=row.error,
        tokens_in=row.tokens_in,
        tokens_out=row.tokens_out,
        latency_s=row.latency_s,
        cost_usd=row.cost_usd,
        covers=[row.subtask_id],
    )


def summarize_records(
    records: list[OutcomeRecord],
) -> tuple[list[DomainMeasurement], dict[str, LatencyModel]]:
    """Recorded rows as profiling summarises live outcomes: success per (executor, domain),
    a latency model per executor; rows any answer would have passed are left out."""
    return summarize_outcomes(
        (row.executor, row.skill, row.correct, as_result(row)) for row in records if row.informative
    )


def read_split(records: str | Path, suites: list[str], split: str) -> list[OutcomeRecord]:
    """Every recorded row of `split` for each of `suites`, from a pool's recording folder."""
    return [row for suite in suites for row in read_records(recording_dir(records, suite, split))]


def profile_from_records(
    pool: ExecutorPool, records: list[OutcomeRecord], seed: int = 0
) -> tuple[MeasuredProfile, list[DomainMeasurement]]:
    """The pool's measured profile from recorded rows (of the train split): success per
    executor and domain with its count (and Wilson interval, in the measurements), and a
    latency model fitted per executor."""
    if not records:
        raise ConfigError("no recorded outcomes to profile from")
    measurements, latencies = summarize_records(records)
    suites = sorted({row.suite for row in records})
    n_tasks = len({row.task_id for row in records})
    profile = measured_profile(pool, measurements, latencies, suites, n_tasks, seed)
    return profile, measurements


class ReplayAgreement(BaseModel):
    """How well replayed episodes reproduce live ones of the same policy, tasks and seed."""

    policy: str
    tasks: int
    steps: int  # steps of the live episodes
    identical_steps: float  # share whose executor, status and output replay reproduced
    success_live: float
    success_replayed: float
    # the suite's partial scores, mean per key (a compound task's share of parts right), where
    # whole-task success is too rare to compare
    scores_live: dict[str, float] = {}
    scores_replayed: dict[str, float] = {}


def _mean_scores(trajectories: list[Trajectory]) -> dict[str, float]:
    keys = sorted({key for t in trajectories for key in t.scores})
    return {key: mean([t.scores.get(key, 0.0) for t in trajectories]) for key in keys}


def replay_agreement(
    policy: str, live: list[Trajectory], replayed: list[Trajectory]
) -> ReplayAgreement:
    """Step by step (task, milestone, step id): what a live run and its replay both did."""

    def steps(trajectories: list[Trajectory]) -> dict[tuple[str, int, str], tuple]:
        return {
            (t.task_id, m.index, r.step_id): (r.executor, r.status, r.output)
            for t in trajectories
            for m in t.milestones
            for r in m.results
        }

    live_steps, replayed_steps = steps(live), steps(replayed)
    same = sum(replayed_steps.get(key) == value for key, value in live_steps.items())
    return ReplayAgreement(
        policy=policy,
        tasks=len(live),
        steps=len(live_steps),
        identical_steps=same / len(live_steps) if live_steps else 1.0,
        success_live=mean([float(t.correct) for t in live]),
        success_replayed=mean([float(t.correct) for t in replayed]),
        scores_live=_mean_scores(live),
        scores_replayed=_mean_scores(replayed),
    )
