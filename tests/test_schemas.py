from __future__ import annotations

import pytest
from pydantic import ValidationError

from easy_core.core.schemas import (
    SCHEMA_VERSION,
    EvalMetrics,
    ExecutorProfile,
    Milestone,
    Plan,
    PoolConfig,
    RewardBreakdown,
    RunMetrics,
    Step,
    StepResult,
    Task,
    Trajectory,
)
from easy_core.evaluation.evaluator import EvalSpec, evaluate
from easy_core.world.suites.sim import generate_task
from tests.conftest import SIM_DEFAULT


@pytest.fixture(scope="module")
def trajectory(params) -> Trajectory:
    _, trajectories = evaluate(EvalSpec("sim", "greedy", SIM_DEFAULT, n=3), params)
    return max(trajectories, key=lambda t: len(t.milestones))


def test_every_schema_round_trips_through_json(trajectory, pool):
    milestone = trajectory.milestones[0]
    samples = [
        pool.profiles[0],
        pool.config,
        generate_task(0, "test", 5),
        milestone.plan.steps[0],
        milestone.plan,
        milestone.results[0],
        milestone,
        trajectory.reward,
        trajectory.metrics,
        trajectory,
    ]
    for model in samples:
        again = type(model).model_validate_json(model.model_dump_json())
        assert again == model, type(model).__name__
    assert {type(m) for m in samples} >= {
        ExecutorProfile,
        PoolConfig,
        Task,
        Step,
        Plan,
        StepResult,
        Milestone,
        RewardBreakdown,
        RunMetrics,
        Trajectory,
    }


def test_records_written_to_disk_carry_a_schema_version(trajectory, params):
    metrics, _ = evaluate(EvalSpec("sim", "cheapest", SIM_DEFAULT, n=2), params)
    for record in (trajectory, metrics, generate_task(0, "test", 0)):
        assert record.model_dump()["schema_version"] == SCHEMA_VERSION
    assert isinstance(metrics, EvalMetrics)


def test_unknown_schema_version_is_rejected(trajectory):
    data = trajectory.model_dump()
    data["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(ValidationError, match="schema_version"):
        Trajectory.model_validate(data)


def test_pool_rejects_duplicate_executor_names(pool):
    data = pool.config.model_dump()
    data["executors"].append(data["executors"][0])
    with pytest.raises(ValidationError, match="appears twice"):
        PoolConfig.model_validate(data)


def test_step_rejects_unknown_fields():
    with pytest.raises(ValidationError, match="depends"):
        Step.model_validate({"id": "s1", "executor": "x", "instruction": "", "depends": []})
