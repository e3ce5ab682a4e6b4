"""Beyond one machine: the rollouts flow on a Dask cluster (a `dask scheduler` and two `dask
worker` processes on loopback, reached through prefect-dask at the address params name) writes
the same shard and tree bytes as a run on the thread pool."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from easy_core.benchmarks.serve_bench import free_port
from tests.conftest import ROOT

pytestmark = pytest.mark.wall


@pytest.fixture(scope="module")
def harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture
def cluster(harness, tmp_path: Path):  # noqa: ANN001
    """A scheduler and two single-threaded workers, each its own process; the workers report
    their task runs to the test's Prefect server."""
    from prefect.settings import PREFECT_API_URL

    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {
        **os.environ,
        "PREFECT_API_URL": str(PREFECT_API_URL.value()),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    logs = [open(tmp_path / f"{name}.log", "w") for name in ("scheduler", "w1", "w2")]  # noqa: SIM115
    processes = [
        subprocess.Popen(
            [*dask, "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
            env=env,
            stdout=logs[0],
            stderr=subprocess.STDOUT,
        )
    ]
    time.sleep(2.0)
    for log in logs[1:]:
        processes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "distributed.cli.dask_worker",
                    address,
                    "--nthreads",
                    "1",
                    "--no-dashboard",
                    "--host",
                    "127.0.0.1",
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
    from distributed import Client

    with Client(address, timeout=60) as client:
        client.wait_for_workers(2, timeout=60)
    try:
        yield address
    finally:
        for process in processes[::-1]:
            process.terminate()
        for process in processes:
            process.wait(30)
        for log in logs:
            log.close()


def small_params(tmp_path: Path, **pipeline: object) -> Path:
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    data["rollouts"].update(shards=4, episodes_per_shard=40, tree_tasks=8)
    data["pipeline"].update(result_storage=str(tmp_path / "results"), **pipeline)
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_rollout_shards_on_a_dask_cluster_are_the_local_bytes(cluster: str, tmp_path: Path) -> None:
    from distributed import Client

    from flows.rollouts import rollouts_flow
    from flows.settings import params_from, task_runner

    local_params = small_params(tmp_path / "local")
    dask_params = small_params(tmp_path / "dask", task_runner="dask", dask_address=cluster)
    runner = task_runner(params_from(str(dask_params)))
    assert type(runner).__name__ == "DaskTaskRunner"

    rollouts_flow(
        str(local_params),
        out_dir=str(tmp_path / "local" / "out"),
        trees_dir=str(tmp_path / "local" / "trees"),
    )
    with Client(cluster) as client:
        before = client.run(lambda dask_worker: len(dask_worker.state.log))
        rollouts_flow.with_options(task_runner=runner)(
            str(dask_params),
            out_dir=str(tmp_path / "dask" / "out"),
            trees_dir=str(tmp_path / "dask" / "trees"),
        )
        after = client.run(lambda dask_worker: len(dask_worker.state.log))
    assert len(after) == 2 and all(after[w] > before[w] for w in after)  # both workers ran shards
    local = sorted((tmp_path / "local" / "out").glob("shard-*"))
    remote = sorted((tmp_path / "dask" / "out").glob("shard-*"))
    assert [p.name for p in local] == [p.name for p in remote] and len(local) >= 4
    for a, b in zip(local, remote, strict=True):
        assert a.read_bytes() == b.read_bytes()
    # the tree shards ran there too, and their union is the local trees, byte for byte
    trees = [tmp_path / run / "trees" / "trees.jsonl" for run in ("local", "dask")]
    assert trees[0].read_bytes() == trees[1].read_bytes()
    assert len(trees[0].read_text().splitlines()) == 8


def test_evaluation_runs_on_a_dask_cluster_with_the_local_results(
    cluster: str, tmp_path: Path
) -> None:
    from flows.evaluate import evaluate_flow
    from flows.settings import params_from, task_runner

    local_params = small_params(tmp_path / "local")
    dask_params = small_params(tmp_path / "dask", task_runner="dask", dask_address=cluster)
    runner = task_runner(params_from(str(dask_params)))
    options = {"n": 20, "policies": ["greedy", "cheapest"]}
    evaluate_flow(str(local_params), out_dir=str(tmp_path / "local" / "eval"), **options)
    from distributed import Client

    with Client(cluster) as client:
        before = client.run(lambda dask_worker: len(dask_worker.state.log))
        evaluate_flow.with_options(task_runner=runner)(
            str(dask_params), out_dir=str(tmp_path / "dask" / "eval"), **options
        )
        after = client.run(lambda dask_worker: len(dask_worker.state.log))
    assert sum(after[w] - before[w] for w in after) > 0  # the evaluations ran on the workers
    metrics = [tmp_path / run / "eval" / "metrics.json" for run in ("local", "dask")]
    assert metrics[0].read_bytes() == metrics[1].read_bytes()
    assert len(yaml.safe_load(metrics[0].read_text())) == 4  # 2 policies x 2 pools
