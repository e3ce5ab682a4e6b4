"""Evaluation: a policy on a suite and a pool -> trajectories and summary metrics."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from easy_core.core.clock import TimeMode
from easy_core.core.datasets import (
    Manifest,
    config_hash,
    finished_shard_file,
    remove_partial_files,
    shard_text,
    store_shard_file,
    write_manifest,
)
from easy_core.core.errors import ConfigError
from easy_core.core.params import Params
from easy_core.core.schemas import EvalMetrics, Trajectory
from easy_core.core.stats import mean, wilson_interval
from easy_core.core.storage import write_json, write_jsonl
from easy_core.executors.pool import ExecutorPool, load_pool
from easy_core.policies import get_policy
from easy_core.policies.batch import ProgressCallback, run_episodes
from easy_core.runtime.episode import EpisodeRunner
from easy_core.world.suites import Suite, get_suite


@dataclass
class EvalSpec:
    suite: str
    policy: str
    pool: str | Path
    n: int
    seed: int = 0
    split: str = "test"
    sequential: bool = False
    mode: TimeMode = "virtual"
    # Tasks first_task .. first_task + n - 1 of the split: a report on tasks that no earlier
    # choice saw starts after the ones it did.
    first_task: int = 0


def _setup(spec: EvalSpec, params: Params) -> tuple[Suite, ExecutorPool, EpisodeRunner]:
    suite = get_suite(spec.suite, params)
    pool = load_pool(spec.pool, params)
    policy = get_policy(spec.policy)  # fail on an unknown name before any work
    prepare = getattr(policy, "prepare", None)
    if prepare is not None:  # a learned policy: fail on a missing model before any work
        prepare(params)
    runner = EpisodeRunner(
        pool, params, suite.check, sequential=spec.sequential, score=getattr(suite, "score", None)
    )
    return suite, pool, runner


def evaluate(
    spec: EvalSpec, params: Params, on_episode: ProgressCallback | None = None
) -> tuple[EvalMetrics, list[Trajectory]]:
    suite, pool, runner = _setup(spec, params)
    tasks = suite.tasks(spec.split, spec.n, spec.seed, start=spec.first_task)
    trajectories = run_episodes(tasks, runner, spec.policy, spec.seed, spec.mode, on_episode)
    return summarize(trajectories, spec, pool.name), trajectories


# Sections that only training, data generation, the pipeline, serving or the release benchmark
# read: a change to them leaves every stored evaluation episode as it was, so they stay out of
# the reuse key.
NOT_READ_BY_EPISODES = frozenset(
    {
        "eval",
        "sft",
        "grpo",
        "sft_data",
        "rollouts",
        "pipeline",
        "evaluate",
        "nightly",
        "serve",
        "release",
    }
)


def evaluate_resumable(
    spec: EvalSpec,
    params: Params,
    out_dir: str | Path,
    on_episode: ProgressCallback | None = None,
    identity: dict | None = None,
) -> tuple[EvalMetrics, list[Trajectory]]:
    """`evaluate`, written as it goes in shards of `eval.shard_size` episodes (OUT/shards/,
    each atomic, with a manifest): a run killed at any point, run again, redoes only the
    unfinished shard and ends with the same bytes. A shard is its tasks (start and count), not
    the run's length, so a longer run of the same spec reuses a shorter one's finished shards,
    and a run from `first_task` (a multiple of the shard size) reuses and writes the same shard
    files as a run from task 0 that reaches as far.
    `identity`: what else decides the episodes beyond the spec and params (e.g. a checkpoint's
    digest); a finished shard is reused only while it is the same."""
    shards_dir = Path(out_dir) / "shards"
    if shards_dir.is_dir():
        remove_partial_files(shards_dir)
    suite, pool, runner = _setup(spec, params)
    size = params.eval.shard_size
    if spec.first_task % size:
        raise ConfigError(
            f"first task {spec.first_task} is not a multiple of eval.shard_size {size}: start "
            "at a shard's first task, or set eval.shard_size to a divisor of it"
        )
    spec_fields = {
        key: value for key, value in asdict(spec).items() if key not in ("n", "first_task")
    }
    settings = config_hash(
        {
            "spec": {**spec_fields, "pool": pool.config, "shard_size": size},
            "params": params.model_dump(exclude=NOT_READ_BY_EPISODES),
            **({"identity": identity} if identity else {}),
        }
    )
    trajectories: list[Trajectory] = []
    infos = []
    end = spec.first_task + spec.n
    for start in range(spec.first_task, end, size):
        shard, count = start // size, min(size, end - start)
        shard_settings = config_hash({"run": settings, "count": count})
        info = finished_shard_file(shards_dir, shard, shard_settings)
        if info is not None:
            text = (shards_dir / info.path).read_text(encoding="utf-8")
            done = [Trajectory.model_validate_json(line) for line in text.splitlines()]
            if on_episode is not None:
                on_episode(len(done))
        else:
            tasks = suite.tasks(spec.split, count, spec.seed, start=start)
            done = run_episodes(tasks, runner, spec.policy, spec.seed, spec.mode, on_episode)
            info = store_shard_file(shards_dir, shard, shard_text(done), shard_settings)
        trajectories.extend(done)
        infos.append(info)
    write_manifest(shards_dir, Manifest(kind="evaluation", config_hash=settings, shards=infos))
    return summarize(trajectories, spec, pool.name), trajectories


def summarize(trajectories: list[Trajectory], spec: EvalSpec, pool_name: str) -> EvalMetrics:
    n = len(trajectories)
    successes = sum(t.correct for t in trajectories)
    return EvalMetrics(
        suite=spec.suite,
        policy=spec.policy,
        pool=pool_name,
        split=spec.split,
        n=n,
        first_task=spec.first_task,
        seed=spec.seed,
        sequential=spec.sequential,
        success_rate=successes / n if n else 0.0,
        success_ci95=wilson_interval(successes, n),
        mean_cost_usd=mean([t.metrics.cost_usd for t in trajectories]),
        mean_makespan_s=mean([t.metrics.makespan_s for t in trajectories]),
        mean_tokens=mean([float(t.metrics.tokens) for t in trajectories]),
        mean_reward=mean([t.reward.total for t in trajectories]),
        mean_reward_correct=mean([t.reward.correct for t in trajectories]),
        mean_reward_efficiency=mean([t.reward.efficiency for t in trajectories]),
        mean_reward_completeness=mean([t.reward.completeness for t in trajectories]),
        end_reasons=dict(Counter(t.end_reason for t in trajectories)),
        suite_scores={
            key: mean([t.scores.get(key, 0.0) for t in trajectories])
            for key in sorted({key for t in trajectories for key in t.scores})
        },
    )


def write_results(
    out_dir: str | Path, metrics: EvalMetrics, trajectories: list[Trajectory]
) -> None:
    out = Path(out_dir)
    write_jsonl(out / "episodes.jsonl", trajectories)
    write_json(out / "metrics.json", metrics)
