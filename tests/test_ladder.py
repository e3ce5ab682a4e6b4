"""The CPU model ladder served: infra/local/ladder-up.sh starts one llama.cpp server per model
(SmolLM2-135M, Qwen2.5-Coder-0.5B and -1.5B from their packages), the official `openai` client
gets an answer from each, and configs/pools/cpu-ladder.yaml runs a real task over them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import openai
import pytest
import yaml

from easy_core.benchmarks.serve_bench import free_port
from easy_core.core.params import Params
from easy_core.core.schemas import PoolConfig
from easy_core.evaluation.recording import record, replay_agreement
from easy_core.evaluation.solve import solve_task
from easy_core.executors.pool import ExecutorPool, replayed
from easy_core.executors.replay import read_records
from easy_core.policies.batch import run_episodes
from easy_core.runtime.episode import EpisodeRunner
from easy_core.world.suites.math import MathSuite
from tests.conftest import ROOT
from tests.test_remote_storage import BIN

LADDER = ROOT / "configs/pools/cpu-ladder.yaml"
MODELS = ["smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
pytestmark = pytest.mark.wall


@pytest.fixture(scope="module")
def ladder(tmp_path_factory: pytest.TempPathFactory):
    ports = [free_port() for _ in MODELS]
    env = {
        **os.environ,
        "EASY_STATE_DIR": str(tmp_path_factory.mktemp("ladder")),
        "LADDER_PORTS": " ".join(map(str, ports)),
        "EASY_BIN": str(BIN),
    }
    up = subprocess.run(
        [str(ROOT / "infra/local/ladder-up.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    try:
        assert up.returncode == 0, up.stderr
        urls = up.stdout.split()
        assert urls == [f"http://127.0.0.1:{port}/v1" for port in ports]
        yield dict(zip(MODELS, urls, strict=True))
    finally:
        subprocess.run([str(ROOT / "infra/local/ladder-down.sh")], env=env, timeout=120)


def test_every_rung_answers_the_openai_client(ladder: dict[str, str]) -> None:
    for model, url in ladder.items():
        client = openai.OpenAI(base_url=url, api_key="none", max_retries=0)
        assert [m.id for m in client.models.list()] == [model]
        reply = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Say OK."}],
            max_tokens=4,
            temperature=0,
        )
        assert reply.choices[0].message.content.strip() and reply.usage.completion_tokens >= 1


def ladder_config(ladder: dict[str, str]) -> dict:
    """configs/pools/cpu-ladder.yaml on the test's ports, with its priors."""
    config = yaml.safe_load(LADDER.read_text())
    config.pop("profile")
    names = dict(zip(["smollm2-135m", "qwen-coder-0.5b", "qwen-coder-1.5b"], MODELS, strict=True))
    for entry in config["executors"]:
        if entry["name"] in names:
            entry["endpoint"] = ladder[names[entry["name"]]]
    return config


def test_the_ladder_pool_solves_arithmetic_through_its_models(
    ladder: dict[str, str], params: Params, tmp_path: Path
) -> None:
    """A math task on the ladder pool (the test's ports, the priors): the step runs on one of
    the ladder's models and its answer is checked by the suite."""
    pool = tmp_path / "cpu-ladder.yaml"
    pool.write_text(yaml.safe_dump(ladder_config(ladder)))
    task, trajectory = solve_task("math", pool, "strongest", params, question="What is 6 * 7?")
    steps = [r for m in trajectory.milestones for r in m.results]
    assert steps and steps[0].executor == "qwen-coder-1.5b" and steps[0].status == "ok"
    assert steps[0].tokens_out > 0 and trajectory.metrics.cost_usd > 0


def test_the_05b_is_recorded_and_replayed(
    ladder: dict[str, str], params: Params, tmp_path: Path
) -> None:
    """Recorded outcomes of a real model: the 0.5B on two math test tasks (alone, checked by the
    suite), then `strongest` over the replay of that recording takes exactly the recorded
    steps, offline, beside a live run of the same tasks."""
    config = ladder_config(ladder)
    [entry] = [e for e in config["executors"] if e["name"] == "qwen-coder-0.5b"]
    pool = ExecutorPool.from_config(
        PoolConfig.model_validate(
            {**config, "executors": [{**entry, "max_output_tokens": 96}], "name": "rung"}
        )
    )
    suite = MathSuite()
    directory, written = record(pool, suite, "test", 2, tmp_path)
    rows = list(read_records(directory))
    assert written == 1 and len(rows) == 2
    assert all(r.status == "ok" and 0 < r.tokens_out <= 96 and r.latency_s > 0 for r in rows)
    assert all(r.cost_usd > 0 for r in rows)

    tasks = list(suite.tasks("test", 2, 0))
    replay = ExecutorPool.from_config(replayed(pool.config, tmp_path))
    again = run_episodes(tasks, EpisodeRunner(replay, params, suite.check), "strongest", 0)
    steps = [r for t in again for m in t.milestones for r in m.results]
    assert [s.output for s in steps] == [r.output for r in rows]
    assert [t.correct for t in again] == [r.correct for r in rows]
    live = run_episodes(tasks, EpisodeRunner(pool, params, suite.check), "strongest", 0)
    agreement = replay_agreement("strongest", live, again)
    assert agreement.steps == 2  # both live steps ran on the 0.5B, as their replays did
    assert {r.executor for t in live for m in t.milestones for r in m.results} == {
        "qwen-coder-0.5b"
    }


def test_the_program_policy_gets_exact_arithmetic_from_a_real_models_program(
    ladder: dict[str, str], params: Params, tmp_path: Path
) -> None:
    """`program` on the ladder: a real model writes the program, the python tool runs it, and
    the printed value is the suite's answer (at temperature 0, a product no small model gets
    right by itself reliably)."""
    pool = tmp_path / "cpu-ladder.yaml"
    pool.write_text(yaml.safe_dump(ladder_config(ladder)))
    task, trajectory = solve_task(
        "math", pool, "program", params, question="What is 4821 * 377 - 1059?"
    )
    program, run = trajectory.milestones[0].plan.steps
    results = trajectory.milestones[0].results
    assert program.executor.startswith("qwen-coder") and run.executor == "python"
    assert results[0].tokens_out > 0 and results[1].status == "ok"
    assert results[1].output == str(4821 * 377 - 1059) == trajectory.final_answer
