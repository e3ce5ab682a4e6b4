"""Stage `rollouts`: episodes on the training split in independent shards (data/rollouts/).

Each shard's episodes come from a Prefect task cached on (rollout settings, shard id) whose
result (the shard's JSONL) is persisted to the result storage (params: pipeline.result_storage,
e.g. S3); the shard file is written atomically with a checksum sidecar. A re-run, even after a
crash, recomputes nothing already done. A GPU work pool can fan shards out as separate flow runs
(`shard_ids`). The episodes' reward table, every component per episode
(data/rewards/rewards.csv, summary.json), is written with the manifest; tree rollouts
(data/trees/, what GRPO trains on) are grown after the shards."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import INPUTS, NO_CACHE

from easy_core.core.datasets import (
    Manifest,
    read_trajectories,
    remove_partial_files,
    write_manifest,
)
from easy_core.core.params import Params
from easy_core.core.reward import reward_rows, reward_summary, write_reward_table
from easy_core.core.storage import write_json, write_jsonl
from easy_core.learning.episode_rollouts import (
    finished_shard,
    rollout_settings_hash,
    rollout_shard_text,
    store_shard,
)
from easy_core.learning.trees import TaskTree, merge_tree_shards, tree_shard
from flows.settings import (
    load_pool_secrets,
    params_from,
    publish_markdown,
    task_options,
    task_runner,
)


@task(
    task_run_name="rollout-shard-{shard}",
    cache_policy=INPUTS - "params_path",
    persist_result=True,
)
def rollout_shard(shard: int, settings_hash: str, params_path: str | None) -> str:
    """`settings_hash` is the cache key with the shard id: new settings, new episodes."""
    return rollout_shard_text(params_from(params_path), shard)


@flow(name="rollouts", log_prints=True, task_runner=task_runner(params_from(None)))
def rollouts_flow(
    params_path: str | None = None,
    out_dir: str = "data/rollouts",
    shard_ids: list[int] | None = None,
    trees_dir: str = "data/trees",
    rewards_dir: str | None = None,
) -> Manifest:
    """`rewards_dir`: default `rewards` beside `out_dir`."""
    params = params_from(params_path)
    settings = rollout_settings_hash(params)
    load_pool_secrets(params)
    if Path(out_dir).is_dir():
        remove_partial_files(out_dir)  # left by a killed run
    shards = shard_ids if shard_ids is not None else list(range(params.rollouts.shards))
    one = rollout_shard.with_options(**task_options(params))
    progress = create_progress_artifact(0.0, key="rollouts-progress")
    done = {shard: finished_shard(params, shard, out_dir) for shard in shards}
    futures = {
        shard: one.submit(shard, settings, params_path) for shard in shards if done[shard] is None
    }
    infos = []
    for count, shard in enumerate(shards, start=1):
        info = done[shard] or store_shard(params, shard, futures[shard].result(), out_dir)
        infos.append(info)
        update_progress_artifact(progress, 100.0 * count / len(shards))
    manifest = Manifest(kind="rollouts", config_hash=settings, shards=infos)
    if shard_ids is None:  # a fan-out run of some shards leaves the manifest to the full run
        write_manifest(out_dir, manifest)
        reward_table(out_dir, rewards_dir or str(Path(out_dir).parent / "rewards"))
    print(f"{sum(i.records for i in infos)} episodes in {len(infos)} shards")
    if shard_ids is None and params.rollouts.tree_tasks:
        tree_rollouts(params, params_path, trees_dir)
    return manifest


@task(task_run_name="reward-table", cache_policy=NO_CACHE)
def reward_table(rollouts_dir: str, out_dir: str) -> dict:
    """Every reward component of every episode (rewards.csv) and their means (summary.json)."""
    rows = reward_rows(read_trajectories(rollouts_dir))
    write_reward_table(Path(out_dir) / "rewards.csv", rows)
    summary = reward_summary(rows)
    write_json(Path(out_dir) / "summary.json", summary)
    table = "\n".join(f"| {k} | {v:.4f} |" for k, v in summary.items() if isinstance(v, float))
    publish_markdown("reward-summary", f"| component | mean |\n|---|---|\n{table}\n")
    return summary


@task(task_run_name="tree-shard-{shard}", cache_policy=NO_CACHE, persist_result=False)
def grow_tree_shard(shard: int, shards: int, params_path: str | None) -> list[tuple]:
    """One shard of the tree tasks, as JSON text (it may cross to a Dask worker and back)."""
    rows = tree_shard(params_from(params_path), shard, shards)
    return [(position, tree.model_dump_json(), counts) for position, tree, counts in rows]


def tree_rollouts(params: Params, params_path: str | None, out_dir: str) -> dict:
    """Tree rollouts of params.rollouts (K alternatives per decision to depth D) in
    `rollouts.shards` shards on the flow's task runner, stored with their values and
    advantages, and how many orchestrator tokens the trees saved."""
    shards = params.rollouts.shards
    # trees are regrown, not reused: their results are not stored
    options = {k: v for k, v in task_options(params).items() if k != "result_storage"}
    one = grow_tree_shard.with_options(**options)
    futures = [one.submit(shard, shards, params_path) for shard in range(shards)]
    trees, summary = merge_tree_shards(
        [
            [(p, TaskTree.model_validate_json(text), counts) for p, text, counts in f.result()]
            for f in futures
        ]
    )
    write_jsonl(Path(out_dir) / "trees.jsonl", trees)
    write_json(Path(out_dir) / "summary.json", summary)
    publish_markdown(
        "tree-rollouts",
        "| figure | value |\n|---|---|\n"
        + "\n".join(f"| {k} | {v:.3f} |" for k, v in summary.items())
        + "\n",
    )
    print(f"{len(trees)} trees; token saving per leaf {summary['token_saving']:.1%}")
    return summary


if __name__ == "__main__":
    rollouts_flow()
