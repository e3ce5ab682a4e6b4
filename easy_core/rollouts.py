"""Rollout generation in shards. A shard's episodes depend only on (settings, shard id): shard k
holds training tasks k*size .. (k+1)*size-1. Finished shards are skipped on a re-run."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from easy_core.datasets import (
    Manifest,
    ShardInfo,
    config_hash,
    remove_partial_files,
    shard_is_complete,
    shard_name,
    shard_text,
    write_manifest,
    write_shard,
)
from easy_core.evaluation import load_pool, run_episodes
from easy_core.params import Params
from easy_core.runtime.episode import EpisodeRunner
from easy_core.storage import write_json
from easy_core.suites import get_suite


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


def _sidecar(out: Path, shard: int) -> Path:
    return out / (shard_name(shard) + ".info.json")


def finished_shard(params: Params, shard: int, out_dir: str | Path) -> ShardInfo | None:
    """The shard's entry if an identical one (same settings, intact file) is already there."""
    out = Path(out_dir)
    sidecar = _sidecar(out, shard)
    if not sidecar.is_file():
        return None
    recorded = json.loads(sidecar.read_text())
    info = ShardInfo.model_validate(recorded["shard"])
    if recorded.get("config_hash") == rollout_settings_hash(params) and shard_is_complete(
        out, info
    ):
        return info
    return None


def store_shard(params: Params, shard: int, text: str, out_dir: str | Path) -> ShardInfo:
    """Write the shard file atomically, then its sidecar (what marks it finished)."""
    out = Path(out_dir)
    info = write_shard(out, shard, text)
    record = {"config_hash": rollout_settings_hash(params), "shard": info.model_dump()}
    write_json(_sidecar(out, shard), record)
    return info


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
