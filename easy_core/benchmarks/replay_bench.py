"""Replay against live: the same policies on the same tasks and seed, once on the live pool and
once on its recorded outcomes (the `replay` backend). Reports, per policy, the share of live
steps whose executor, status and output replay reproduced, and success live and replayed."""

from __future__ import annotations

import time
from pathlib import Path

from easy_core.core.params import Params
from easy_core.evaluation.recording import ReplayAgreement, replay_agreement
from easy_core.executors.pool import ExecutorPool, load_pool, replayed
from easy_core.policies.batch import run_episodes
from easy_core.runtime.episode import EpisodeRunner
from easy_core.world.suites import get_suite


def replay_benchmark(
    params: Params,
    pool_path: Path,
    records: Path,
    suite_name: str,
    policies: list[str],
    n: int,
    split: str = "test",
    seed: int = 0,
    live: list[str] | None = None,
) -> list[tuple[ReplayAgreement, float, float]]:
    """Per policy: the agreement, and the wall seconds of the live and the replayed runs;
    `live`: executors that run as themselves in the replay too (the game tool)."""
    live_pool = load_pool(pool_path, params)
    replay_pool = ExecutorPool.from_config(replayed(live_pool.config, records, live=live or []))
    suite = get_suite(suite_name, params)
    tasks = list(suite.tasks(split, n, seed))
    score = getattr(suite, "score", None)
    rows = []
    for policy in policies:
        started = time.monotonic()
        live_runner = EpisodeRunner(live_pool, params, suite.check, score=score)
        live = run_episodes(tasks, live_runner, policy, seed)
        live_s = time.monotonic() - started
        started = time.monotonic()
        replay_runner = EpisodeRunner(replay_pool, params, suite.check, score=score)
        again = run_episodes(tasks, replay_runner, policy, seed)
        rows.append((replay_agreement(policy, live, again), live_s, time.monotonic() - started))
    return rows


def replay_markdown(rows: list[tuple[ReplayAgreement, float, float]]) -> str:
    lines = [
        "| policy | tasks | live steps | identical steps | success live | success replayed "
        "| scores live | scores replayed | live s | replay s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def scores(means: dict[str, float]) -> str:
        return ", ".join(f"{key} {value:.3f}" for key, value in means.items()) or "-"

    for a, live_s, replay_s in rows:
        lines.append(
            f"| {a.policy} | {a.tasks} | {a.steps} | {a.identical_steps:.2f} | "
            f"{a.success_live:.2f} | {a.success_replayed:.2f} | {scores(a.scores_live)} | "
            f"{scores(a.scores_replayed)} | {live_s:.1f} | {replay_s:.2f} |"
        )
    return "\n".join(lines) + "\n"
