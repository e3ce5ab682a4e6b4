"""The `openai` backend against an OpenAI-compatible server on loopback, and the secrets rule:
an API key reaches the server and nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
import yaml

from easy_core.core.schemas import ExecutorProfile, LatencyModel, PoolConfig, StepRequest
from easy_core.executors.openai_http import OpenAIExecutor
from easy_core.executors.pool import ExecutorPool
from easy_core.runtime.local_engine import LocalEngine
from easy_core.world.suites.sim import generate_task
from tests.conftest import ROOT, run
from tests.fake_openai import FakeOpenAI
from tests.helpers import make_plan

TASK = generate_task(0, "test", 0)
SKILLS = {
    s: {"success": 0.9, "n": 10} for s in ("arithmetic", "logic", "code", "lookup", "writing")
}


def profile(url: str, key_env: str | None = None, name: str = "remote") -> ExecutorProfile:
    return ExecutorProfile(
        name=name,
        backend="openai",
        endpoint=url,
        model="test-model",
        api_key_env=key_env,
        price_in_per_1m=1.0,
        price_out_per_1m=2.0,
        latency=LatencyModel(ttft_s=0.1, tokens_per_s=50),
        context_window=8192,
        max_output_tokens=64,
        capability=SKILLS,
    )


def test_a_call_returns_the_answer_usage_and_cost():
    with FakeOpenAI(reply=" 1024 ") as server:
        executor = OpenAIExecutor(profile(server.url))
        result = run(executor.run(StepRequest("s1", "2**10?", TASK, max_output_tokens=64)), "wall")
    assert result.status == "ok" and result.output == "1024"
    assert (result.tokens_in, result.tokens_out) == (11, 3)
    assert result.cost_usd == pytest.approx((11 * 1.0 + 3 * 2.0) / 1e6)
    sent = server.requests[0]
    assert sent["path"] == "/v1/chat/completions" and sent["body"]["model"] == "test-model"
    assert sent["body"]["max_tokens"] == 64
    assert "Authorization" not in sent["headers"]  # a local endpoint needs no key


def test_rate_limits_and_server_errors_are_retried_by_the_engine():
    with FakeOpenAI() as server:
        server.errors = [429, 503]
        pool = ExecutorPool.from_config(PoolConfig(name="remote", executors=[profile(server.url)]))
        plan = make_plan([("a", [])], executor="remote")
        outcome = run(LocalEngine().execute(plan, pool.session(1.0), TASK), "wall")
    result = outcome.results[0]
    assert result.status == "ok" and result.attempts == 3
    assert result.faults == ["http_5xx", "http_5xx"]


def test_an_unreachable_endpoint_fails_the_step_without_raising():
    pool = ExecutorPool.from_config(
        PoolConfig(name="remote", executors=[profile("http://127.0.0.1:9/v1")])
    )
    outcome = run(
        LocalEngine().execute(make_plan([("a", [])], executor="remote"), pool.session(1.0), TASK),
        "wall",
    )
    result = outcome.results[0]
    assert result.status == "failed" and set(result.faults) == {"connection_error"}


def test_a_missing_key_is_a_clear_error_that_names_the_variable(monkeypatch):
    monkeypatch.delenv("EASY_MISSING_KEY", raising=False)
    with FakeOpenAI() as server:
        pool = ExecutorPool.from_config(
            PoolConfig(name="remote", executors=[profile(server.url, "EASY_MISSING_KEY")])
        )
        outcome = run(
            LocalEngine().execute(
                make_plan([("a", [])], executor="remote"), pool.session(1.0), TASK
            ),
            "wall",
        )
    assert "EASY_MISSING_KEY" in outcome.results[0].error and not server.requests


def test_the_api_key_reaches_the_server_and_never_a_log_artifact_or_dataset(tmp_path):
    """Runs `easy eval` and the inference flow (with its own Prefect database) on a pool whose
    executor needs a canary key, then scans every file either wrote."""
    canary = f"sk-canary-{uuid.uuid4().hex}"
    env = {
        **os.environ,
        "EASY_CANARY_API_KEY": canary,
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
        "PREFECT_LOGGING_LEVEL": "DEBUG",
    }
    env.pop("PREFECT_API_URL", None)
    with FakeOpenAI(reply="t1=00000000") as server:
        pool_file = tmp_path / "pool.yaml"
        config = PoolConfig(name="remote", executors=[profile(server.url, "EASY_CANARY_API_KEY")])
        pool_file.write_text(yaml.safe_dump(config.model_dump(mode="json")))
        assert canary not in pool_file.read_text()
        params = yaml.safe_load((ROOT / "params.yaml").read_text())
        params["inference"]["pool"] = str(pool_file)
        params_file = tmp_path / "params.yaml"
        params_file.write_text(yaml.safe_dump(params))

        logs = []
        for command in (
            [
                sys.executable,
                "-m",
                "easy_core.cli",
                "eval",
                "--policy",
                "greedy",
                "--pool",
                str(pool_file),
                "--n",
                "3",
                "--out",
                str(tmp_path / "eval"),
                "--params",
                str(params_file),
            ],
            [
                sys.executable,
                "-c",
                "import asyncio\nfrom flows.inference import inference_flow\n"
                f"asyncio.run(inference_flow(index=1, params_path={str(params_file)!r}, "
                f"out_dir={str(tmp_path / 'inference')!r}))",
            ],
        ):
            done = subprocess.run(
                command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
            )
            assert done.returncode == 0, done.stderr[-3000:]
            logs.append(done.stdout + done.stderr)

    assert server.requests and all(
        r["headers"]["Authorization"] == f"Bearer {canary}" for r in server.requests
    )
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".jsonl" for p in written) and any("prefect" in str(p) for p in written)
    for path in written:
        assert canary.encode() not in path.read_bytes(), path
    for text in logs:
        assert canary not in text


def test_a_key_in_a_prefect_secret_block_reaches_the_server_only(tmp_path, monkeypatch):
    from prefect.blocks.system import Secret
    from prefect.testing.utilities import prefect_test_harness

    from flows.settings import load_secret_blocks

    canary = f"sk-block-canary-{uuid.uuid4().hex}"
    monkeypatch.delenv("EASY_BLOCK_API_KEY", raising=False)
    with FakeOpenAI() as server, prefect_test_harness(server_startup_timeout=120):
        Secret(value=canary).save("easy-test-key", overwrite=True)
        remote = profile(server.url, "EASY_BLOCK_API_KEY").model_copy(
            update={"api_key_secret_block": "easy-test-key"}
        )
        pool_file = tmp_path / "pool.yaml"
        pool_file.write_text(
            yaml.safe_dump(PoolConfig(name="remote", executors=[remote]).model_dump(mode="json"))
        )
        assert load_secret_blocks(str(pool_file)) == 1
        pool = ExecutorPool.from_yaml(pool_file)
        outcome = run(
            LocalEngine().execute(
                make_plan([("a", [])], executor="remote"), pool.session(1.0), TASK
            ),
            "wall",
        )
    assert outcome.results[0].status == "ok"
    assert server.requests[0]["headers"]["Authorization"] == f"Bearer {canary}"
    assert (
        canary not in pool_file.read_text() and canary not in outcome.results[0].model_dump_json()
    )
