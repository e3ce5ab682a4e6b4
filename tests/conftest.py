from __future__ import annotations

from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from easy_core.evaluation import load_pool
from easy_core.executors.pool import ExecutorPool
from easy_core.params import Params, load_params
from easy_core.runtime.clock import TimeMode, new_event_loop

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
    return load_params(ROOT / "params.yaml")


@pytest.fixture(scope="session")
def pool(params: Params) -> ExecutorPool:
    return load_pool(SIM_DEFAULT, params)


@pytest.fixture(scope="session")
def unseen_pool(params: Params) -> ExecutorPool:
    return load_pool(SIM_UNSEEN, params)
