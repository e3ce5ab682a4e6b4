from __future__ import annotations

from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from easy_core.core.clock import TimeMode, new_event_loop
from easy_core.core.params import Params, load_params
from easy_core.executors.pool import ExecutorPool, load_pool

ROOT = Path(__file__).resolve().parent.parent
SIM_DEFAULT = ROOT / "configs/pools/sim-default.yaml"
SIM_UNSEEN = ROOT / "configs/pools/sim-unseen.yaml"


def run(coro: Coroutine[Any, Any, Any], mode: TimeMode = "virtual") -> Any:
    loop = new_event_loop(mode)
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


@pytest.fixture(scope="session")
def params() -> Params:
    # the pool files' own cards: a checkout's results/profiles (from a dvc repro) must not move
    # what the tests measure; the pipeline tests read the profiles their own profile stage wrote
    return load_params(ROOT / "params.yaml", ["profile.apply=false"])


@pytest.fixture(scope="session")
def trained_params(params: Params, tmp_path_factory: pytest.TempPathFactory) -> Params:
    """params whose learned policies (`progress`, `graph`) point at small models trained here."""
    from easy_core.learning.policy_training import train_policies

    folder = tmp_path_factory.mktemp("models")
    small = params.model_copy(
        update={
            "policies": params.policies.model_copy(
                update={
                    "progress_model": str(folder / "progress.npz"),
                    "graph_model": str(folder / "graph.pt"),
                }
            ),
            "policy_training": params.policy_training.model_copy(
                update={"n_tasks": 400, "epochs": 16, "knn_reference_rows": 2000}
            ),
        }
    )
    train_policies(small, traces_path=folder / "traces.parquet", report_path=folder / "report.json")
    return small


@pytest.fixture(scope="session")
def pool(params: Params) -> ExecutorPool:
    return load_pool(SIM_DEFAULT, params)


@pytest.fixture(scope="session")
def unseen_pool(params: Params) -> ExecutorPool:
    return load_pool(SIM_UNSEEN, params)
