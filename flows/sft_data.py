"""Stage `sft_data`: teacher trajectories on the training split, kept where they succeeded, as
chat examples for the supervised warm start (data/sft/train.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path

from prefect import flow

from easy_core.evaluation import load_pool, run_episodes
from easy_core.runtime.episode import EpisodeRunner
from easy_core.sft_data import teacher_examples
from easy_core.storage import atomic_write_text, write_json
from easy_core.suites.sim import SimSuite
from flows.settings import load_pool_secrets, params_from


@flow(name="sft-data", log_prints=True)
def sft_data_flow(params_path: str | None = None, out_dir: str = "data/sft") -> dict:
    params = params_from(params_path)
    config = params.sft_data
    load_pool_secrets(params)
    suite = SimSuite(params.sim)
    pool = load_pool(config.pool, params)
    tasks = list(suite.tasks("train", config.n_tasks, config.seed))
    runner = EpisodeRunner(pool, params, suite.check)
    trajectories = run_episodes(tasks, runner, config.teacher, config.seed)
    examples = list(teacher_examples(zip(tasks, trajectories, strict=True), pool.profiles))
    atomic_write_text(
        Path(out_dir) / "train.jsonl", "".join(json.dumps(e) + "\n" for e in examples)
    )
    summary = {
        "teacher": config.teacher,
        "tasks": len(tasks),
        "successful_trajectories": sum(t.correct for t in trajectories),
        "examples": len(examples),
    }
    write_json(Path(out_dir) / "summary.json", summary)
    print(summary)
    return summary


if __name__ == "__main__":
    sft_data_flow()
