"""The `inference` flow: one task through the milestone-plan-act loop, every plan's DAG run as
Prefect tasks (one per step, started when its dependencies finish). The trajectory is returned
and persisted (results/inference/TASK.json) and summarised as an artifact."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prefect import flow

from easy_core.core.schemas import Task
from easy_core.core.storage import atomic_write_text
from easy_core.executors.pool import load_pool
from easy_core.policies import get_policy
from easy_core.runtime.episode import EpisodeRunner
from easy_core.world.suites.sim import SimSuite, generate_task
from flows.prefect_engine import PrefectEngine
from flows.settings import apublish_markdown, load_pool_secrets, params_from, task_runner


def trajectory_markdown(trajectory) -> str:
    lines = [
        f"# {trajectory.task_id}: {'solved' if trajectory.correct else 'not solved'} "
        f"({trajectory.end_reason})",
        "",
        f"cost ${trajectory.metrics.cost_usd:.6f}, makespan {trajectory.metrics.makespan_s:.2f}s, "
        f"{trajectory.metrics.tokens} tokens, reward {trajectory.reward.total:.3f}",
        "",
        "| milestone | step | executor | status | tokens in/out | cost $ | start-end s |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in trajectory.milestones:
        for r in m.results:
            lines.append(
                f"| {m.index + 1} | {r.step_id} | {r.executor} | {r.status} | "
                f"{r.tokens_in}/{r.tokens_out} | {r.cost_usd:.6f} | "
                f"{r.started_s:.2f}-{r.finished_s:.2f} |"
            )
    return "\n".join(lines) + "\n"


@flow(name="inference", log_prints=True, task_runner=task_runner(params_from(None)))
async def inference_flow(
    task_json: str | None = None,
    index: int = 0,
    seed: int = 0,
    params_path: str | None = None,
    out_dir: str = "results/inference",
) -> dict:
    """Solve `task_json` (a Task as JSON), or held-out sim task `index`."""
    params = params_from(params_path)
    config = params.inference
    await asyncio.to_thread(load_pool_secrets, params)  # Secret.load is sync-compatible
    task = Task.model_validate_json(task_json) if task_json else generate_task(seed, "test", index)
    pool = load_pool(config.pool, params)
    engine = PrefectEngine.from_params(params)
    runner = EpisodeRunner(pool, params, SimSuite.check, engine=engine)
    trajectory = await runner.run(task, get_policy(config.policy), seed)
    atomic_write_text(Path(out_dir) / f"{task.id}.json", trajectory.model_dump_json(indent=2))
    await apublish_markdown(f"inference-{task.id}", trajectory_markdown(trajectory))
    return trajectory.model_dump(mode="json")


if __name__ == "__main__":
    asyncio.run(inference_flow())
