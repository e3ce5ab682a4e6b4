"""Stage `rollouts`: episodes on the training split in independent shards (data/rollouts/).

Each shard is its own Prefect task, cached on (rollout settings, shard id), and its file is
written atomically with a checksum sidecar: a re-run, even after a crash, recomputes nothing
already done. A GPU work pool can fan shards out as separate flow runs (`shard_ids`)."""

from __future__ import annotations

from prefect import flow, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import INPUTS

from easy_core.datasets import Manifest, ShardInfo, write_manifest
from easy_core.rollouts import generate_shard, rollout_settings_hash
from flows.settings import params_from, task_options


@task(task_run_name="rollout-shard-{shard}", cache_policy=INPUTS, persist_result=True)
def rollout_shard(
    shard: int, settings_hash: str, params_path: str | None, out_dir: str
) -> ShardInfo:
    """`settings_hash` is part of the cache key: new settings, new shard."""
    return generate_shard(params_from(params_path), shard, out_dir)


@flow(name="rollouts", log_prints=True)
def rollouts_flow(
    params_path: str | None = None,
    out_dir: str = "data/rollouts",
    shard_ids: list[int] | None = None,
) -> Manifest:
    params = params_from(params_path)
    config = params.rollouts
    settings = rollout_settings_hash(params)
    shards = shard_ids if shard_ids is not None else list(range(config.shards))
    one = rollout_shard.with_options(**task_options(params))
    progress = create_progress_artifact(0.0, key="rollouts-progress")
    futures = [one.submit(shard, settings, params_path, out_dir) for shard in shards]
    infos = []
    for done, future in enumerate(futures, start=1):
        infos.append(future.result())
        update_progress_artifact(progress, 100.0 * done / len(futures))
    manifest = Manifest(kind="rollouts", config_hash=settings, shards=infos)
    if shard_ids is None:  # a fan-out run of some shards leaves the manifest to the full run
        write_manifest(out_dir, manifest)
    print(f"{sum(i.records for i in infos)} episodes in {len(infos)} shards")
    return manifest


if __name__ == "__main__":
    rollouts_flow()
