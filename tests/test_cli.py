from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, SIM_DEFAULT

VALID = {
    "milestone": "two lookups, then combine",
    "steps": [
        {"id": "s1", "executor": "sim-s", "instruction": "find A", "depends_on": []},
        {"id": "s2", "executor": "sim-tool", "instruction": "find B", "depends_on": []},
        {
            "id": "s3",
            "executor": "sim-xl",
            "instruction": "combine {s1} and {s2}",
            "depends_on": ["s1", "s2"],
        },
    ],
    "final_answer": None,
}


def easy(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "easy_core.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def assert_user_error(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for word in words:
        assert word in result.stderr, result.stderr


def test_plan_validate_valid(tmp_path):
    plan = write(tmp_path, "plan.json", json.dumps(VALID))
    result = easy("plan", "validate", str(plan), "--pool", str(SIM_DEFAULT))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "valid"


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("definitely not json", ["not valid JSON"]),
        (b"\x89PNG\r\n\x1a\n\x00\x00", ["not valid JSON"]),
        ("", ["not valid JSON"]),
        ("[1, 2, 3]", ["JSON object"]),
        (
            json.dumps(
                {
                    **VALID,
                    "steps": VALID["steps"]
                    + [{"id": "s1", "executor": "sim-s", "instruction": ""}],
                }
            ),
            ["'s1' is used twice"],
        ),
        (
            json.dumps(
                {
                    "steps": [
                        {"id": "a", "executor": "sim-s", "instruction": "", "depends_on": ["b"]},
                        {"id": "b", "executor": "sim-s", "instruction": "", "depends_on": ["a"]},
                    ]
                }
            ),
            ["cycle", "a", "b"],
        ),
        (
            json.dumps({"steps": [{"id": "a", "executor": "gpt-9", "instruction": ""}]}),
            ["gpt-9", "not in the pool"],
        ),
        (
            json.dumps({"steps": [{"id": "a", "executor": "sim-s", "instruction": 7}]}),
            ["steps.0.instruction"],
        ),
        (json.dumps({"steps": []}), ["no steps"]),
    ],
)
def test_plan_validate_errors_exit_2_without_traceback(tmp_path, content, words):
    plan = write(tmp_path, "plan.json", content)
    assert_user_error(easy("plan", "validate", str(plan), "--pool", str(SIM_DEFAULT)), *words)


def test_plan_validate_too_many_steps_uses_the_params_limit(tmp_path):
    steps = [{"id": f"s{i}", "executor": "sim-s", "instruction": ""} for i in range(70)]
    plan = write(tmp_path, "plan.json", json.dumps({"steps": steps}))
    assert_user_error(easy("plan", "validate", str(plan)), "70 steps; the limit is 64")


def test_missing_files_and_bad_pool(tmp_path):
    assert_user_error(easy("plan", "validate", str(tmp_path / "nope.json")), "nope.json")
    plan = write(tmp_path, "plan.json", json.dumps(VALID))
    bad_pool = write(tmp_path, "pool.yaml", "name: p\nexecutors:\n  - name: x\n    backend: sim\n")
    assert_user_error(
        easy("plan", "validate", str(plan), "--pool", str(bad_pool)),
        "pool.yaml",
        "executors.0.price_in_per_1m",
    )
    not_yaml = write(tmp_path, "broken.yaml", "executors: [\n")
    assert_user_error(
        easy("eval", "--policy", "greedy", "--pool", str(not_yaml), "--n", "2"), "not valid YAML"
    )


def test_eval_rejects_unknown_policy_and_suite():
    assert_user_error(
        easy("eval", "--policy", "smartest", "--pool", str(SIM_DEFAULT), "--n", "2"),
        "unknown policy 'smartest'",
        "greedy",
    )
    assert_user_error(
        easy(
            "eval", "--suite", "chess", "--policy", "greedy", "--pool", str(SIM_DEFAULT), "--n", "2"
        ),
        "unknown suite 'chess'",
    )


def test_bad_params_file_names_the_field(tmp_path):
    params = write(tmp_path, "params.yaml", "runtime:\n  max_milestones: zero\n")
    result = easy(
        "eval",
        "--policy",
        "greedy",
        "--pool",
        str(SIM_DEFAULT),
        "--n",
        "2",
        "--params",
        str(params),
    )
    assert_user_error(result, "params.yaml", "runtime.max_milestones")


def test_set_overrides_one_params_field_and_names_a_bad_one(tmp_path):
    plan = write(tmp_path, "plan.json", json.dumps(VALID))
    assert easy("plan", "validate", str(plan)).returncode == 0
    limited = easy("--set", "limits.max_steps_per_plan=2", "plan", "validate", str(plan))
    assert_user_error(limited, "3 steps; the limit is 2")
    assert_user_error(
        easy("--set", "limits.max_steps=2", "plan", "validate", str(plan)),
        "--set limits.max_steps=2",
        "limits.max_steps",
    )
    assert_user_error(easy("--set", "limits", "plan", "validate", str(plan)), "section.field=value")


def test_executor_aimed_grpo_options_need_in_process_sampling(tmp_path):
    """With vLLM generation or unstructured sampling (TRL's own) the executor temperature, loss
    mask and guide would be silently unused: the params are refused, naming the fix."""
    plan = write(tmp_path, "plan.json", json.dumps(VALID))
    aimed = ("--set", "grpo.loss_tokens=executors")
    assert easy(*aimed, "plan", "validate", str(plan)).returncode == 0
    assert_user_error(
        easy(*aimed, "--set", "grpo.use_vllm=true", "plan", "validate", str(plan)),
        "in-process structured sampling only",
        "use_vllm: false",
    )
    guided = ("--set", "grpo.guide=[strongest, greedy]", "--set", "grpo.structured=false")
    assert_user_error(
        easy(*guided, "plan", "validate", str(plan)), "guide act in the in-process", "structured"
    )


def test_a_commands_own_field_options_apply_after_set(monkeypatch):
    from easy_core.cli import app as cli

    monkeypatch.setattr(cli, "_overrides", ["grpo.max_steps=9", "grpo.temperature=0.5"])
    params = cli.resolve_params(None, {"grpo.max_steps": 4, "rollouts.tree_k": None})
    assert (params.grpo.max_steps, params.grpo.temperature) == (4, 0.5)
    assert params.rollouts.tree_k == cli.resolve_params(None).rollouts.tree_k


def test_eval_writes_results_and_is_reproducible(tmp_path):
    runs = []
    for name in ("a", "b"):
        out = tmp_path / name
        result = easy(
            "eval",
            "--suite",
            "sim",
            "--policy",
            "greedy",
            "--pool",
            str(SIM_DEFAULT),
            "--n",
            "25",
            "--seed",
            "3",
            "--out",
            str(out),
        )
        assert result.returncode == 0, result.stderr
        assert "greedy" in result.stdout and "success" in result.stdout
        metrics = json.loads((out / "metrics.json").read_text())
        lines = (out / "episodes.jsonl").read_text().splitlines()
        assert len(lines) == 25
        assert all(json.loads(line)["schema_version"] == 1 for line in lines)
        runs.append((metrics, lines))
    for key in (
        "suite",
        "policy",
        "pool",
        "n",
        "success_rate",
        "mean_cost_usd",
        "mean_makespan_s",
        "mean_tokens",
        "mean_reward",
    ):
        assert key in runs[0][0]
    assert runs[0] == runs[1]
    assert runs[0][0]["n"] == 25 and runs[0][0]["policy"] == "greedy"


def test_bench_orchestrators_names_a_bad_model_option_and_a_missing_checkpoint(tmp_path):
    pool = str(SIM_DEFAULT)
    assert_user_error(
        easy("bench", "orchestrators", "--model", "models/sft", "--pool", pool, "--n", "1"),
        "LABEL=CHECKPOINT",
    )
    missing = str(tmp_path / "nowhere")
    assert_user_error(
        easy("bench", "orchestrators", "--model", f"sft={missing}", "--pool", pool, "--n", "1"),
        "nowhere",
    )


def test_sft_data_writes_the_teacher_turns_with_drawn_pools(tmp_path):
    result = easy(
        "--set", "sft_data.n_tasks=3", "--set", "sft_data.real=[]",
        "--set", "sft_data.random_pools=2", "--set", "sft_data.random_pool_tasks=3",
        "--set", "orchestrator.executor_last=true",
        "sft-data", "--out", str(tmp_path / "sft"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "sft" / "summary.json").read_text())
    assert summary["suites"]["sim-random"]["pools"] == ["sim-random-0", "sim-random-1"]
    assert summary["executor_last"] is True  # train-sft records it in the checkpoint
    lines = (tmp_path / "sft" / "train.jsonl").read_text().splitlines()
    assert len(lines) == summary["examples"] > 0
    answers = [json.loads(line)["messages"][-1]["content"] for line in lines]
    planned = [a for a in answers if '"executor"' in a]
    assert planned and all(a.index('"covers"') < a.index('"executor"') for a in planned)
    bad = easy("--set", "sft_data.random_pools=-1", "sft-data", "--out", str(tmp_path / "x"))
    assert bad.returncode == 2 and "random_pools" in bad.stderr and "Traceback" not in bad.stderr


def test_record_names_a_suite_it_cannot_check_a_bad_split_and_a_missing_recording(tmp_path):
    args = ["record", "--pool", str(SIM_DEFAULT), "--n", "2", "--out", str(tmp_path)]
    assert_user_error(easy(*args, "--suite", "sim", "--split", "test"), "cannot check single")
    assert_user_error(easy(*args, "--suite", "math", "--split", "dev"), "split must be one of")
    replay = write(tmp_path, "replay.yaml", f"name: r\nreplays: {SIM_DEFAULT}\nrecords: nowhere\n")
    assert_user_error(
        easy("eval", "--suite", "math", "--policy", "greedy", "--pool", str(replay), "--n", "1"),
        "no recorded outcomes",
        "easy record",
    )


def test_level_table_refuses_to_tune_on_the_tasks_it_reports(tmp_path):
    args = ("bench", "level-table", "--pool", str(SIM_DEFAULT), "--n", "2")
    assert_user_error(easy(*args, "--split", "test"), "--table", "validation")
    missing = tmp_path / "table.json"
    assert_user_error(easy(*args, "--split", "test", "--table", str(missing)), "no level table")


def test_bench_paired_compares_two_runs_task_by_task_and_refuses_other_tasks(tmp_path):
    """`easy bench paired`: its figures agree with the two runs' own summaries (a wiring that
    paired the wrong tasks or swapped the runs would not), and runs over other tasks exit 2."""
    ran = easy("compare", "--pool", str(SIM_DEFAULT), "--policies", "strongest,cheapest",
               "--n", "30", "--out", str(tmp_path / "a"))  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    summary = json.loads((tmp_path / "a" / "compare.json").read_text())
    strongest, cheapest = (summary[f"sim-default/{p}"] for p in ("strongest", "cheapest"))
    episodes = tmp_path / "a" / "episodes"
    paired = easy("bench", "paired", "--reference", str(episodes / "strongest"),
                  "--other", str(episodes / "cheapest"), "--json")  # fmt: skip
    assert paired.returncode == 0, paired.stderr
    figures = json.loads(paired.stdout)
    assert figures["other"]["policy"] == "cheapest" and figures["other"]["n"] == 30
    expected = cheapest["success_rate"] - strongest["success_rate"]
    assert figures["success_difference"] == pytest.approx(expected)
    assert expected != 0  # the two policies differ on these tasks, so the check above can fail
    low, high = figures["success_difference_ci95"]
    assert low <= expected <= high
    ratio = cheapest["mean_cost_usd"] / strongest["mean_cost_usd"]
    assert figures["cost_ratio"] == pytest.approx(ratio) and ratio < 1
    assert figures["reward_difference"] == pytest.approx(
        cheapest["mean_reward"] - strongest["mean_reward"]
    )

    # a suite's graded scores are paired too: give each run varied per-task scores
    from easy_core.core.datasets import Manifest, read_trajectories, write_manifest, write_shard

    scored = {}
    for policy, scale in (("strongest", 0.3), ("cheapest", 0.7)):
        runs = list(read_trajectories(episodes / policy / "shards"))
        for index, episode in enumerate(runs):
            episode.scores = {"parts": (index % 4) * scale / 3}
        scored[policy] = tmp_path / "scored" / policy
        info = write_shard(scored[policy], 0, runs)
        write_manifest(scored[policy], Manifest(kind="trajectories", shards=[info]))
    graded = easy("bench", "paired", "--reference", str(scored["strongest"]),
                  "--other", str(scored["cheapest"]), "--json")  # fmt: skip
    assert graded.returncode == 0, graded.stderr
    parts = [(i % 4) / 3 for i in range(30)]
    assert json.loads(graded.stdout)["score_parts_difference"] == pytest.approx(
        sum(parts) / 30 * (0.7 - 0.3)
    )

    fewer = easy("compare", "--pool", str(SIM_DEFAULT), "--policies", "strongest", "--n", "10",
                 "--out", str(tmp_path / "b"))  # fmt: skip
    assert fewer.returncode == 0, fewer.stderr
    other_tasks = easy("bench", "paired", "--reference", str(tmp_path / "b" / "episodes" /
                       "strongest"), "--other", str(episodes / "cheapest"))  # fmt: skip
    assert_user_error(other_tasks, "different tasks", "--split and --n")


def test_bench_frontier_measures_each_policy_against_the_reference_on_its_own_tasks(tmp_path):
    """`easy bench frontier`: each point's cost ratio and success agree with the runs' own
    summaries; a policy run twice on the same tasks is one point; a run the reference did not
    cover, a missing reference and an unknown graded score each exit 2."""
    ran = easy("compare", "--pool", str(SIM_DEFAULT), "--policies", "strongest,cheapest,random",
               "--n", "30", "--out", str(tmp_path / "a"))  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    summary = json.loads((tmp_path / "a" / "compare.json").read_text())
    drawn = easy("bench", "frontier", "--run", f"sim={tmp_path / 'a'}",
                 "--out", str(tmp_path / "f"))  # fmt: skip
    assert drawn.returncode == 0, drawn.stderr
    points = {p["policy"]: p for p in json.loads((tmp_path / "f" / "frontier.json").read_text())}
    assert set(points) == {"strongest", "cheapest", "random", "oracle"}  # compare adds the oracle
    strongest = summary["sim-default/strongest"]
    for policy in ("cheapest", "random"):
        mine = summary[f"sim-default/{policy}"]
        assert points[policy]["value"] == pytest.approx(mine["success_rate"])
        ratio = mine["mean_cost_usd"] / strongest["mean_cost_usd"]
        assert points[policy]["cost_ratio"] == pytest.approx(ratio) and ratio < 1
        low, high = points[policy]["cost_ratio_ci95"]
        assert low < ratio < high
        assert points[policy]["reference_value"] == pytest.approx(strongest["success_rate"])
    assert points["strongest"]["cost_ratio"] == pytest.approx(1.0)
    assert (tmp_path / "f" / "frontier.png").stat().st_size > 10_000
    twice = easy("bench", "frontier", "--run", f"sim={tmp_path / 'a'}", "--run",
                 f"sim={tmp_path / 'a'}", "--out", str(tmp_path / "h"))  # fmt: skip
    assert twice.returncode == 0, twice.stderr
    assert len(json.loads((tmp_path / "h" / "frontier.json").read_text())) == len(points)

    more = easy("compare", "--pool", str(SIM_DEFAULT), "--policies", "cheapest", "--n", "40",
                "--out", str(tmp_path / "b"))  # fmt: skip
    assert more.returncode == 0, more.stderr
    uncovered = easy("bench", "frontier", "--run", f"sim={tmp_path / 'a'}",
                     "--run", f"sim={tmp_path / 'b'}", "--out", str(tmp_path / "g"))  # fmt: skip
    assert_user_error(uncovered, "played every task", "at least the same --n")
    no_reference = easy("bench", "frontier", "--run", f"sim={tmp_path / 'b'}",
                        "--out", str(tmp_path / "g"))  # fmt: skip
    assert_user_error(no_reference, "reference policy 'strongest'", "--reference")
    no_score = easy("bench", "frontier", "--run", f"sim={tmp_path / 'a'}", "--score",
                    "sim=parts", "--out", str(tmp_path / "g"))  # fmt: skip
    assert_user_error(no_score, "no graded score 'parts'", "--score")
