"""The Prefect flows against a temporary Prefect server (prefect_test_harness)."""

from __future__ import annotations

import asyncio
import json

import pytest
import yaml

from tests.conftest import ROOT

SMALL = {
    "profile": {"n_tasks": 10},
    "sft_data": {"n_tasks": 20},
    "rollouts": {"shards": 2, "episodes_per_shard": 10},
    "evaluate": {"n": 10, "policies": ["greedy", "oracle"]},
    "nightly": {"n": 10, "policies": ["greedy"]},
}


@pytest.fixture(scope="module")
def harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture
def small_params(tmp_path):
    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    for section, values in SMALL.items():
        data[section].update(values)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def artifact_keys() -> set[str]:
    from prefect.client.orchestration import get_client

    async def read():
        async with get_client() as client:
            return {a.key for a in await client.read_artifacts()}

    return asyncio.run(read())


def test_pipeline_flow_writes_every_stage_and_publishes_artifacts(
    harness, small_params, tmp_path, monkeypatch
):
    from flows.pipeline import pipeline_flow

    monkeypatch.chdir(tmp_path)
    summary = pipeline_flow(small_params)
    assert summary["rollout_episodes"] == 20 and summary["evaluations"] == 4
    assert summary["sft_examples"] > 0
    for path in (
        "results/profiles/sim-default.yaml",
        "results/profiles/profiles.md",
        "data/sft/train.jsonl",
        "data/rollouts/manifest.json",
        "data/rewards/rewards.csv",
        "results/metrics.json",
        "results/eval.md",
        "results/pareto.png",
    ):
        assert (tmp_path / path).is_file(), path
    assert (tmp_path / "results/pareto.png").read_bytes()[:4] == b"\x89PNG"
    metrics = json.loads((tmp_path / "results/metrics.json").read_text())
    assert set(metrics) == {
        f"{p}/{q}" for p in ("sim-default", "sim-unseen") for q in ("greedy", "oracle")
    }
    example = json.loads((tmp_path / "data/sft/train.jsonl").read_text().splitlines()[0])
    assert [m["role"] for m in example["messages"]] == ["system", "user", "assistant"]
    assert {
        "evaluation-results",
        "evaluation-pareto",
        "executor-profiles",
        "reward-summary",
    } <= artifact_keys()


def test_inference_flow_runs_each_step_as_a_named_prefect_task(harness, small_params, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from flows.inference import inference_flow

    state = asyncio.run(
        inference_flow(index=2, params_path=small_params, out_dir=str(tmp_path), return_state=True)
    )
    trajectory = state.result()
    steps = [r for m in trajectory["milestones"] for r in m["results"]]
    assert trajectory["end_reason"] == "final_answer" and steps
    assert (tmp_path / f"{trajectory['task_id']}.json").is_file()

    async def task_run_names():
        async with get_client() as client:
            runs = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(
                    id=FlowRunFilterId(any_=[state.state_details.flow_run_id])
                )
            )
            return {run.name for run in runs}

    names = asyncio.run(task_run_names())
    assert {f"{s['step_id']}-{s['executor']}" for s in steps} <= names, names
    # independent steps overlapped in time
    first = trajectory["milestones"][0]["results"]
    roots = [
        r
        for r, step in zip(first, trajectory["milestones"][0]["plan"]["steps"], strict=True)
        if not step["depends_on"]
    ]
    if len(roots) > 1:
        assert max(r["started_s"] for r in roots) < min(r["finished_s"] for r in roots)
