"""One engine contract: the same faulty DAGs on the local engine, on the Prefect engine with the
thread pool task runner and with a Dask task runner (worker processes) give the same outcomes:
each step's status, executor, attempts, faults and answers. Prefect runs against a temporary
server (prefect_test_harness)."""

from __future__ import annotations

import asyncio

import pytest

from easy_core.core.clock import new_event_loop
from easy_core.core.params import Params
from easy_core.core.schemas import FaultRates, Trajectory
from easy_core.executors.pool import ExecutorPool, load_pool_config, load_pool_context
from easy_core.policies.baselines import BASELINES
from easy_core.runtime.episode import EpisodeRunner
from easy_core.runtime.local_engine import LocalEngine
from easy_core.world.suites.sim import SimSuite, generate_task
from tests.conftest import SIM_DEFAULT

pytestmark = pytest.mark.wall
FAULTS = FaultRates(connection_error=0.15, http_5xx=0.1, malformed=0.1, empty=0.05)
TASKS = [generate_task(0, "test", i) for i in range(4)]


@pytest.fixture(scope="module")
def harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="module")
def setting(params: Params) -> tuple[Params, ExecutorPool]:
    """A fast sim world with faults on every executor; breakers that never open (when one opens
    depends on how concurrent failures interleave in wall time, which runners may order
    differently) and short backoffs."""
    fast = params.model_copy(
        update={
            "sim": params.sim.model_copy(update={"time_scale": 0.02}),
            "resilience": params.resilience.model_copy(
                update={"breaker_failures": 1000, "backoff_s": 0.01}
            ),
        }
    )
    config = load_pool_config(SIM_DEFAULT).model_copy(update={"faults": FAULTS})
    return fast, ExecutorPool.from_config(config, load_pool_context(fast))


def outcome(trajectories: list[Trajectory]) -> list[tuple]:
    return [
        (
            t.task_id,
            t.end_reason,
            t.final_answer,
            [
                (r.step_id, r.status, r.executor, r.attempts, tuple(r.faults), r.sub_answers)
                for m in t.milestones
                for r in m.results
            ],
        )
        for t in trajectories
    ]


async def episodes(runner: EpisodeRunner) -> list[Trajectory]:
    policy = BASELINES["greedy"]()
    return list(await asyncio.gather(*(runner.run(t, policy, 0) for t in TASKS)))


def local_outcome(fast: Params, pool: ExecutorPool) -> list[tuple]:
    engine = LocalEngine(resilience=fast.resilience, sync_fast_path=False)
    loop = new_event_loop("wall")
    try:
        return outcome(
            loop.run_until_complete(
                episodes(EpisodeRunner(pool, fast, SimSuite.check, engine=engine))
            )
        )
    finally:
        loop.close()


def prefect_outcome(fast: Params, pool: ExecutorPool, runner_name: str) -> list[tuple]:
    from prefect import flow
    from prefect.task_runners import ThreadPoolTaskRunner

    from flows.prefect_engine import PrefectEngine

    if runner_name == "dask":
        from prefect_dask import DaskTaskRunner

        task_runner = DaskTaskRunner(
            cluster_kwargs={"n_workers": 2, "threads_per_worker": 4, "processes": True}
        )
    else:
        task_runner = ThreadPoolTaskRunner(max_workers=16)

    @flow(task_runner=task_runner)
    async def run_them() -> list[Trajectory]:
        engine = PrefectEngine.from_params(fast)
        return await episodes(EpisodeRunner(pool, fast, SimSuite.check, engine=engine))

    return outcome(asyncio.run(run_them()))


def test_faults_fire_and_the_local_engine_recovers_from_them(setting) -> None:  # noqa: ANN001
    fast, pool = setting
    got = local_outcome(fast, pool)
    steps = [s for _, _, _, task_steps in got for s in task_steps]
    assert any(attempts > 1 for _, _, _, attempts, _, _ in steps)  # retried or fell back
    assert any(faults for _, _, _, _, faults, _ in steps)
    assert local_outcome(fast, pool) == got  # repeatable in wall time


@pytest.mark.parametrize("runner_name", ["threads", "dask"])
def test_the_prefect_engine_gives_the_local_engines_outcomes(
    harness,
    setting,
    runner_name: str,  # noqa: ANN001
) -> None:
    fast, pool = setting
    assert prefect_outcome(fast, pool, runner_name) == local_outcome(fast, pool)
