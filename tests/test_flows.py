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
    "sft": {"max_steps": 1, "max_examples": 2},
    "grpo": {"max_steps": 1, "max_completion_length": 16, "tasks": 2},
    "rollouts": {"shards": 2, "episodes_per_shard": 10, "tree_tasks": 5},
    "policy_training": {"n_tasks": 60, "epochs": 4, "knn_reference_rows": 200},
    "evaluate": {"n": 10, "policies": ["greedy", "graph", "oracle"], "orchestrator_n": 1},
    "orchestrator": {"max_new_tokens": 48},
    "nightly": {"n": 10, "policies": ["greedy"], "orchestrator_n": 1},
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
    assert summary["rollout_episodes"] == 20 and summary["evaluations"] == 10
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
        "data/traces/traces.parquet",
        "models/progress.npz",
        "models/graph.pt",
        "results/policies.json",
        "data/trees/trees.jsonl",
        "data/trees/summary.json",
        "models/sft/config.json",
        "models/sft/model.safetensors",
        "models/sft/README.md",
        "models/grpo/config.json",
        "models/grpo/README.md",
        "results/training/sft/curve.png",
        "results/training/sft/metrics.json",
        "results/training/grpo/curve.png",
        "results/training/grpo/metrics.json",
    ):
        assert (tmp_path / path).is_file(), path
    assert (tmp_path / "results/pareto.png").read_bytes()[:4] == b"\x89PNG"
    metrics = json.loads((tmp_path / "results/metrics.json").read_text())
    assert set(metrics) == {  # the trained orchestrator is evaluated with the policies
        f"{p}/{q}"
        for p in ("sim-default", "sim-unseen")
        for q in ("greedy", "graph", "oracle", "easy-sft", "easy-grpo")
    }
    assert metrics["sim-default/easy-grpo"]["n"] == 1 and metrics["sim-default/greedy"]["n"] == 10
    # every stage after the profile read its measurement: the cards carry its sample counts
    from easy_core.core.params import load_params
    from easy_core.executors.pool import load_pool

    measured = yaml.safe_load((tmp_path / "results/profiles/sim-default.yaml").read_text())
    cards = load_pool(ROOT / "configs/pools/sim-default.yaml", load_params(small_params))
    counts = {
        (card.name, skill): capability.n
        for card in cards.profiles
        for skill, capability in card.capability.items()
    }
    expected = {
        (name, skill): domain["n"]
        for name, executor in measured["executors"].items()
        for skill, domain in executor["capability"].items()
    }
    assert expected and all(counts[key] == n for key, n in expected.items())
    example = json.loads((tmp_path / "data/sft/train.jsonl").read_text().splitlines()[0])
    assert [m["role"] for m in example["messages"]] == ["system", "user", "assistant"]
    assert {
        "evaluation-results",
        "evaluation-pareto",
        "executor-profiles",
        "reward-summary",
        "policy-training",
        "sft-training",
        "sft-training-curve",
        "grpo-training",
        "grpo-training-curve",
        "tree-rollouts",
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


def test_killed_flow_run_reuses_finished_task_results_when_run_again(tmp_path):
    """Flow recovery: SIGKILL the process running the rollouts flow after some shard tasks
    finished; a new run of the same flow takes those from the result storage (Cached)."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time

    data = yaml.safe_load((ROOT / "params.yaml").read_text())
    data["rollouts"].update(shards=10, episodes_per_shard=200)
    storage = tmp_path / "results"
    data["pipeline"]["result_storage"] = str(storage)
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(data))
    script = (
        "from prefect.task_runners import ThreadPoolTaskRunner\n"
        "from flows.rollouts import rollouts_flow\n"
        "flow = rollouts_flow.with_options(task_runner=ThreadPoolTaskRunner(max_workers=1))\n"
        f"flow({str(params_file)!r}, out_dir={str(tmp_path / 'rollouts')!r})\n"
    )
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    }
    env.pop("PREFECT_API_URL", None)

    first = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: the kill takes its Prefect server too
    )
    deadline = time.monotonic() + 180
    while (
        not storage.is_dir() or len(list(storage.iterdir())) < 3
    ) and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    stored = len(list(storage.iterdir()))
    assert 3 <= stored < 10, "the kill should land mid-run"
    # a fresh worker has none of the first one's local files: only the result storage
    shutil.rmtree(tmp_path / "rollouts", ignore_errors=True)

    second = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert second.returncode == 0, second.stderr[-3000:]
    logs = second.stdout + second.stderr
    # every result finished before the kill is reused; one may have been mid-write
    assert logs.count("Cached") >= max(2, stored - 1)
    manifest = json.loads((tmp_path / "rollouts/manifest.json").read_text())
    assert [s["shard"] for s in manifest["shards"]] == list(range(10))
    assert sum(s["records"] for s in manifest["shards"]) == 2000
