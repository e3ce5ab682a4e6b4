"""One task end to end (`easy solve`): a question turned into a suite's task, or a suite's test
task by index, run by a policy on a pool; the trajectory says what ran where and what it cost."""

from __future__ import annotations

from pathlib import Path

from easy_core.core.errors import ConfigError
from easy_core.core.params import Params
from easy_core.core.schemas import Task, Trajectory
from easy_core.executors.pool import load_pool
from easy_core.policies import get_policy
from easy_core.policies.batch import run_episodes
from easy_core.runtime.episode import EpisodeRunner
from easy_core.world.suites import get_suite


def solve_task(
    suite_name: str,
    pool_path: str | Path,
    policy: str,
    params: Params,
    question: str | None = None,
    index: int | None = None,
    seed: int = 0,
) -> tuple[Task, Trajectory]:
    suite = get_suite(suite_name, params)
    if index is not None:
        task = next(iter(suite.tasks("test", 1, seed, start=index)))
    elif question:
        from_question = getattr(suite, "from_question", None)
        if from_question is None:
            raise ConfigError(
                f"suite {suite_name!r} cannot turn a question into a task; pick one of its test "
                "tasks with --index N instead"
            )
        task = from_question(question)
    else:
        raise ConfigError("give a QUESTION, or --index N for the suite's test task N")
    get_policy(policy)  # an unknown name fails before any model loads
    pool = load_pool(pool_path, params)
    runner = EpisodeRunner(pool, params, suite.check, score=getattr(suite, "score", None))
    (trajectory,) = run_episodes([task], runner, policy, seed, mode="wall")
    return task, trajectory
