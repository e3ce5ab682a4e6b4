"""Integration: a real Prefect server and process worker on loopback, the deployments of
infra/prefect.yaml, and a deployment run driven to Completed through the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from easy_core.benchmarks.serve_bench import free_port
from tests.conftest import ROOT

BIN = Path(sys.executable).parent


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    state = tmp_path_factory.mktemp("prefect-stack")
    env = {
        **os.environ,
        "EASY_STATE_DIR": str(state),
        "PREFECT_PORT": str(free_port()),
        "EASY_BIN": str(BIN),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    up = subprocess.run(
        [str(ROOT / "infra/local/prefect-up.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    pids = {
        name: int((state / f"{name}.pid").read_text())
        for name in ("server", "worker")
        if (state / f"{name}.pid").exists()
    }
    if up.returncode != 0:
        subprocess.run([str(ROOT / "infra/local/prefect-down.sh")], env=env, timeout=120)
        pytest.fail(f"prefect-up failed: {up.stderr}\n{(state / 'server.log').read_text()[-2000:]}")
    env.update(
        PREFECT_API_URL=up.stdout.strip().splitlines()[-1],
        PREFECT_HOME=str(state / "home"),
        EASY_CHECKOUT=str(ROOT),
        EASY_WORKER_IMAGE="easy-worker:test",
    )
    yield env, state, pids
    subprocess.run([str(ROOT / "infra/local/prefect-down.sh")], env=env, timeout=120)


def prefect(env, *args, timeout=300):
    return subprocess.run(
        [str(BIN / "prefect"), *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_deploy_run_evaluate_and_stop_cleanly(stack):
    env, state, pids = stack
    deploy = prefect(env, "--no-prompt", "deploy", "--all", "--prefect-file", "infra/prefect.yaml")
    assert deploy.returncode == 0, deploy.stdout[-3000:] + deploy.stderr[-3000:]
    listing = prefect(env, "deployment", "ls").stdout
    for name in (
        "pipeline/pipeline",
        "rollouts/rollouts",
        "evaluate/evaluate",
        "inference/inference",
        "serve/serve",
        "nightly-eval/nightly-eval",
    ):
        assert name in listing

    nightly = prefect(env, "deployment", "inspect", "nightly-eval/nightly-eval").stdout
    assert "0 3 * * *" in nightly and "UTC" in nightly

    out = state / "results"
    run = prefect(
        env,
        "deployment",
        "run",
        "evaluate/evaluate",
        "--param",
        "n=5",
        "--param",
        'policies=["greedy", "oracle"]',
        "--param",
        'pools=["configs/pools/sim-default.yaml"]',
        "--param",
        f"out_dir={out}",
        "--watch",
        "--watch-timeout",
        "240",
    )
    assert run.returncode == 0, (
        run.stdout[-3000:] + run.stderr[-2000:] + (state / "worker.log").read_text()[-3000:]
    )
    assert "Completed" in run.stdout
    assert (out / "metrics.json").is_file() and (out / "pareto.png").is_file()
    artifact = prefect(env, "artifact", "inspect", "evaluation-results")
    assert artifact.returncode == 0 and "greedy" in artifact.stdout

    worker = pids["worker"]
    assert alive(worker)
    down = subprocess.run([str(ROOT / "infra/local/prefect-down.sh")], env=env, timeout=120)
    assert down.returncode == 0
    assert not alive(worker) and not alive(pids["server"])
