"""Rollout generation in shards. A shard's episodes depend only on (settings, shard id): shard k
holds training tasks k*size .. (k+1)*size-1. Finished shards are skipped on a re-run."""

from __future__ import annotations

import json
from pathlib import Path

from easy_core.datasets import ShardInfo, config_hash, shard_is_complete, shard_name, write_shard
from easy_core.evaluation import load_pool, run_episodes
from easy_core.params import Params
from easy_core.runtime.episode import EpisodeRunner
from easy_core.storage import write_json
from easy_core.suites import get_suite


def rollout_settings_hash(params: Params) -> str:
    return config_hash({"rollouts": params.rollouts, "sim": params.sim, "runtime": params.runtime})


def generate_shard(params: Params, shard: int, out_dir: str | Path) -> ShardInfo:
    """Write shard `shard` unless an identical one (same settings, intact file) is there."""
    out = Path(out_dir)
    settings = rollout_settings_hash(params)
    sidecar = out / (shard_name(shard) + ".info.json")
    if sidecar.is_file():
        recorded = json.loads(sidecar.read_text())
        info = ShardInfo.model_validate(recorded["shard"])
        if recorded.get("config_hash") == settings and shard_is_complete(out, info):
            return info
    config = params.rollouts
    suite = get_suite("sim", params)
    pool = load_pool(config.pool, params)
    tasks = suite.tasks(
        "train", config.episodes_per_shard, config.seed, start=shard * config.episodes_per_shard
    )
    runner = EpisodeRunner(pool, params, suite.check)
    trajectories = run_episodes(tasks, runner, config.policy, config.seed)
    info = write_shard(out, shard, trajectories)
    write_json(sidecar, {"config_hash": settings, "shard": info.model_dump()})
    return info
