"""Rollout generation in shards. A shard's episodes depend only on (settings, shard id): shard k
holds training tasks k*size .. (k+1)*size-1. Finished shards are skipped on a re-run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from easy_core.core.datasets import (
    Manifest,
    ShardInfo,
    config_hash,
    finished_shard_file,
    remove_partial_files,
    shard_text,
    store_shard_file,
    write_manifest,
)
from easy_core.core.params import Params
from easy_core.executors.pool import load_pool
from easy_core.policies.batch import run_episodes
from easy_core.runtime.episode import EpisodeRunner
from easy_core.world.suites import get_suite


def rollout_settings_hash(params: Params) -> str:
    return config_hash(
        {
            "rollouts": params.rollouts,
            "sim": params.sim,
            "runtime": params.runtime,
            "resilience": params.resilience,
        }
    )


def rollout_shard_text(params: Params, shard: int) -> str:
    """The episodes of shard `shard`, as JSONL text."""
    config = params.rollouts
    suite = get_suite("sim", params)
    pool = load_pool(config.pool, params)
    start = shard * config.episodes_per_shard
    tasks = suite.tasks("train", config.episodes_per_shard, config.seed, start=start)
    runner = EpisodeRunner(pool, params, suite.check)
    return shard_text(run_episodes(tasks, runner, config.policy, config.seed))


def finished_shard(params: Params, shard: int, out_dir: str | Path) -> ShardInfo | None:
    """The shard's entry if an identical one (same settings, intact file) is already there."""
    return finished_shard_file(out_dir, shard, rollout_settings_hash(params))


def store_shard(params: Params, shard: int, text: str, out_dir: str | Path) -> ShardInfo:
    return store_shard_file(out_dir, shard, text, rollout_settings_hash(params))


def generate_rollouts(
    params: Params, out_dir: str | Path, on_shard: Callable[[ShardInfo], None] | None = None
) -> Manifest:
    """Every shard of params.rollouts, one after another, skipping finished ones; then the
    manifest. Safe to kill at any moment and run again."""
    if Path(out_dir).is_dir():
        remove_partial_files(out_dir)
    infos = []
    for shard in range(params.rollouts.shards):
        infos.append(generate_shard(params, shard, out_dir))
        if on_shard is not None:
            on_shard(infos[-1])
    manifest = Manifest(kind="rollouts", config_hash=rollout_settings_hash(params), shards=infos)
    write_manifest(out_dir, manifest)
    return manifest


def generate_shard(params: Params, shard: int, out_dir: str | Path) -> ShardInfo:
    """Write shard `shard` unless an identical one is already there."""
    return finished_shard(params, shard, out_dir) or store_shard(
        params, shard, rollout_shard_text(params, shard), out_dir
    )
