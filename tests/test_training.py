"""The LLM orchestrator: SFT with TRL on the packaged SmolLM2 (real training steps on the CPU),
the checkpoint with its card and curve, and the `easy` policy on it (in process and over the
OpenAI API with a JSON-schema response format)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from easy_core.core.errors import ConfigError
from easy_core.core.params import Params
from easy_core.evaluation.evaluator import EvalSpec, evaluate
from easy_core.executors.pool import load_pool_config
from easy_core.learning.sft import load_examples, train_sft
from easy_core.learning.teacher_data import teacher_examples
from tests.conftest import SIM_DEFAULT
from tests.fake_openai import FakeOpenAI

pytest.importorskip("trl")


@pytest.fixture(scope="module")
def sft_data(params: Params, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from easy_core.executors.pool import load_pool
    from easy_core.policies.batch import run_episodes
    from easy_core.runtime.episode import EpisodeRunner
    from easy_core.world.suites.sim import SimSuite

    pool = load_pool(SIM_DEFAULT, params)
    tasks = list(SimSuite(params.sim).tasks("train", 12, 0))
    runner = EpisodeRunner(pool, params, SimSuite.check)
    trajectories = run_episodes(tasks, runner, "greedy", 0)
    rows = list(teacher_examples(zip(tasks, trajectories, strict=True), pool.profiles))
    path = tmp_path_factory.mktemp("sft") / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def checkpoint(params: Params, sft_data: Path, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("ckpt") / "sft"
    sft = params.sft.model_copy(update={"data": str(sft_data), "max_steps": 2, "max_examples": 4})
    metrics = train_sft(sft, out)
    return out, metrics


def test_teacher_answers_cite_the_step_that_produced_them(sft_data: Path, params: Params) -> None:
    """Each teacher trajectory ends with an answer turn citing its final subtask's step, and
    every turn of the teacher fits the turn schema the policy decodes under."""
    import jsonschema

    from easy_core.plans.structured import turn_schema
    from easy_core.world.suites.sim import SimSuite

    rows = [json.loads(line) for line in sft_data.read_text().splitlines()]
    tasks = {t.id: t for t in SimSuite(params.sim).tasks("train", 12, 0)}
    names = [e.name for e in load_pool_config(SIM_DEFAULT).executors]
    answers = [r for r in rows if json.loads(r["messages"][-1]["content"])["final_answer"]]
    assert answers and len({r["task_id"] for r in answers}) == len(answers)
    for row in answers:
        task = tasks[row["task_id"]]
        assert json.loads(row["messages"][-1]["content"])["final_answer"].startswith("{m")
        assert row["messages"][-1]["content"].count(task.sink.id) >= 1
    first = [r for r in rows if r["turn"] == 0]
    for row in first:
        schema = turn_schema(tasks[row["task_id"]], names, [], 64)
        jsonschema.validate(json.loads(row["messages"][-1]["content"]), schema)


def test_sft_writes_a_checkpoint_with_card_and_curve(checkpoint) -> None:
    out, metrics = checkpoint
    for name in ("config.json", "model.safetensors", "tokenizer.json", "README.md", "curve.png"):
        assert (out / name).is_file(), name
    assert not out.with_name(out.name + ".tmp").exists()
    curve = json.loads((out / "curve.json").read_text())
    assert [c["step"] for c in curve] == [1, 2]
    assert all(c["loss"] > 0 for c in curve)
    assert metrics["trainable_parameters"] > 0 and metrics["examples"] == 4
    card = (out / "README.md").read_text()
    assert metrics["data_sha256"] in card and "max_steps: 2" in card
    config = json.loads((out / "config.json").read_text())
    # float32 weights that say nothing of the GGUF they came from (converters refuse those)
    assert config["use_cache"] is True and "quantization_config" not in config


def test_a_checkpoint_is_run_only_in_the_output_contract_it_learnt(
    checkpoint, params: Params
) -> None:
    """SFT records the contract of its data (greedy's turns here: executor first, no
    per-subtask estimates); the policy refuses to run the checkpoint under another, naming the
    setting that fits."""
    from easy_core.executors.hf_models import CONTRACT_FILE, checkpoint_contract
    from easy_core.policies.llm import LLMPolicy

    out, metrics = checkpoint
    learnt = {
        "executor_last": False,
        "subtask_estimates": False,
        "executor_levels": False,
        "escalation_hints": False,
    }
    assert json.loads((out / CONTRACT_FILE).read_text()) == learnt == checkpoint_contract(out)
    assert metrics["executor_last"] is False and metrics["subtask_estimates"] is False
    assert checkpoint_contract("smollm2-135m") is None  # a packaged base learnt none
    for key in learnt:
        other = params.orchestrator.model_copy(update={"model": str(out), key: True})
        with pytest.raises(ConfigError, match=f"orchestrator.{key}=False"):
            LLMPolicy().prepare(params.model_copy(update={"orchestrator": other}))


def test_sft_changes_only_the_trained_layers(checkpoint, params: Params) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from easy_core.executors.hf_models import load_causal_lm

    out, _ = checkpoint
    base, _ = load_causal_lm("smollm2-135m", 2)
    tuned = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    layers = len(base.model.layers)
    frozen = base.model.layers[0].self_attn.q_proj.weight
    trained = base.model.layers[layers - 1].mlp.down_proj.weight
    assert torch.equal(frozen, tuned.model.layers[0].self_attn.q_proj.weight)
    assert not torch.equal(trained, tuned.model.layers[layers - 1].mlp.down_proj.weight)


def test_a_stopped_sft_run_goes_on_from_its_last_save(
    checkpoint, params: Params, sft_data: Path, tmp_path: Path
) -> None:
    """Stopped right after its step-1 save, a rerun with the same params resumes at step 1 and
    ends with the weights of the run that never stopped; other params start afresh."""
    import torch
    from safetensors.torch import load_file
    from transformers import TrainerCallback

    from easy_core.learning.checkpoints import resumable_staging

    class Stopped(Exception):
        pass

    class StopAfterSave(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            raise Stopped

    whole, _ = checkpoint
    update = {"data": str(sft_data), "max_steps": 2, "max_examples": 4, "save_steps": 1}
    sft = params.sft.model_copy(update=update)
    out = tmp_path / "sft"
    with pytest.raises(Stopped):
        train_sft(sft, out, callbacks=[StopAfterSave()])
    staging = tmp_path / "sft.tmp"
    assert not out.exists() and (staging / "trainer" / "checkpoint-1").is_dir()

    metrics = train_sft(sft, out)
    assert metrics["resumed_from_step"] == 1 and not staging.exists()
    assert [c["step"] for c in json.loads((out / "curve.json").read_text())] == [1, 2]
    assert "after resuming at step 1" in (out / "README.md").read_text()
    resumed, uninterrupted = (
        load_file(out / "model.safetensors"),
        load_file(whole / "model.safetensors"),
    )
    assert all(torch.allclose(resumed[k], uninterrupted[k], atol=1e-6) for k in uninterrupted)

    (staging / "trainer" / "checkpoint-1").mkdir(parents=True)
    (staging / "trainer" / "checkpoint-1" / "trainer_state.json").write_text("{}")
    (staging / "run.json").write_text(json.dumps({"learning_rate": 1.0}))
    assert resumable_staging(out, {"learning_rate": 2.0}) == (staging, None)
    assert not (staging / "trainer").exists()


def test_bad_sft_data_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="dvc repro sft_data"):
        load_examples(tmp_path / "none.jsonl", 4)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    with pytest.raises(ConfigError, match="bad.jsonl:1"):
        load_examples(bad, 4)


def test_easy_policy_in_process_never_crashes_and_counts_its_tokens(checkpoint, params) -> None:
    out, _ = checkpoint
    tuned = params.model_copy(
        update={
            "orchestrator": params.orchestrator.model_copy(
                update={"model": str(out), "max_new_tokens": 24}
            )
        }
    )
    _, [trajectory] = evaluate(EvalSpec("sim", "easy", SIM_DEFAULT, 1, 0), tuned)
    # 24 tokens cannot hold a whole plan: the answer is cut, repaired once, then penalised, and
    # the end names the setting to raise
    assert trajectory.end_reason == "invalid_plan"
    assert "orchestrator.max_new_tokens (24)" in trajectory.end_detail
    assert 0 < trajectory.metrics.orchestrator_tokens <= 48
    assert trajectory.reward.completeness < 0.5


def test_easy_policy_over_the_openai_api_asks_for_the_plan_schema(params: Params) -> None:
    plan = {
        "milestone": "answer",
        "steps": [],
        "final_answer": "x",
    }
    with FakeOpenAI(reply=json.dumps(plan)) as server:
        remote = params.model_copy(
            update={
                "orchestrator": params.orchestrator.model_copy(
                    update={"backend": "openai", "endpoint": server.url, "model": "orch"}
                )
            }
        )
        _, [trajectory] = evaluate(EvalSpec("sim", "easy", SIM_DEFAULT, 1, 0), remote)
    assert trajectory.end_reason == "final_answer" and trajectory.final_answer == "x"
    assert trajectory.metrics.orchestrator_tokens == 3
    body = server.requests[0]["body"]
    schema = body["response_format"]["json_schema"]["schema"]
    executors = {p.name for p in load_pool_config(SIM_DEFAULT).executors}
    longest = schema["properties"]["steps"]["anyOf"][-1]["prefixItems"]  # every subtask
    assert all(step["properties"]["id"]["const"].startswith("m1-") for step in longest)
    assert set(longest[0]["properties"]["executor"]["enum"]) == executors
    assert schema["properties"]["final_answer"] == {"type": "null"}  # a first turn must plan
    assert [m["role"] for m in body["messages"]] == ["system", "user"]


def test_sim_reward_plays_a_completion_from_its_tree_node(params: Params) -> None:
    from easy_core.core.clock import DiscreteEventClock, run_synchronously
    from easy_core.learning.grpo import SimReward, tree_prompts
    from easy_core.plans.prompting import plan_text
    from easy_core.policies import get_policy

    # the reward is exactly one episode's, played on by greedy itself
    one_world = {"tasks": 3, "reward_worlds": 1, "continuation": "greedy"}
    small = params.model_copy(update={"grpo": params.grpo.model_copy(update=one_world)})
    rows = tree_prompts(small)
    assert rows and {r["task_index"] for r in rows} <= {0, 1, 2}
    reward = SimReward(small)
    task = reward.tasks[0]
    # greedy's own first plan, played from the root, earns greedy's episode reward
    greedy = run_synchronously(
        reward.runner.run(task, get_policy("greedy"), small.grpo.seed, DiscreteEventClock())
    )
    first = plan_text(greedy.milestones[0].plan)
    assert reward.score(first, 0, []) == pytest.approx(greedy.reward.total)
    assert reward.score("not a plan", 0, []) == 0.0
    assert reward.score('{"milestone": "m", "steps": []}', 0, []) == 0.0  # nothing planned
    scores = reward(
        prompts=[r["prompt"] for r in rows[:2]],
        completions=[[{"role": "assistant", "content": first}]] * 2,
        task_index=[0, 0],
        prefix=["[]", "[]"],
    )
    assert scores == [pytest.approx(greedy.reward.total)] * 2


def test_sim_reward_reads_levels_on_the_pool_it_plays_and_guides_in_levels(
    params: Params,
) -> None:
    """With orchestrator.executor_levels the GRPO reward resolves a completion's levels on the
    pool it plays (a levels plan earns what the plan of the executors they select earns), a name
    where a level belongs scores 0, the prompts' schemas offer the levels, and a guide is the
    guide policy's plan written in levels."""
    from easy_core.core.clock import DiscreteEventClock, run_synchronously
    from easy_core.learning.grpo import ScriptedPolicy, SimReward, tree_prompts
    from easy_core.plans.prompting import LEVELS, plan_text
    from easy_core.plans.validation import parse_plan
    from easy_core.policies import get_policy
    from easy_core.policies.levels import plan_in_levels, resolve_levels

    grpo = {"tasks": 3, "reward_worlds": 1, "continuation": "greedy"}
    levels = params.model_copy(
        update={
            "grpo": params.grpo.model_copy(update=grpo),
            "orchestrator": params.orchestrator.model_copy(update={"executor_levels": True}),
        }
    )
    reward = SimReward(levels)
    task, profiles = reward.tasks[0], reward.runner.pool.profiles
    slope = levels.capability.difficulty_slope
    greedy = run_synchronously(
        reward.runner.run(task, get_policy("greedy"), levels.grpo.seed, DiscreteEventClock())
    )
    names = greedy.milestones[0].plan
    assert reward.score(plan_text(names), 0, []) == 0.0  # names are not levels
    scores = set()
    for level in ("cheapest", ">=95%", "best"):
        plan = names.model_copy(
            update={"steps": [s.model_copy(update={"executor": level}) for s in names.steps]}
        )
        resolved = resolve_levels(plan, task, profiles, slope)
        played = run_synchronously(
            reward.runner.run(
                task, ScriptedPolicy([resolved], then="greedy"), levels.grpo.seed,
                DiscreteEventClock(),
            )
        )  # fmt: skip
        scores.add(reward.score(plan_text(plan), 0, []))
        assert reward.score(plan_text(plan), 0, []) == pytest.approx(played.reward.total)
    assert len(scores) > 1
    guide = parse_plan(reward.first_plan("greedy", 0))
    assert guide == plan_in_levels(names, task, profiles, slope)[0]
    assert all(step.executor in LEVELS for step in guide.steps)
    schema = json.loads(tree_prompts(levels)[0]["schema"])
    assert ">=95%" in json.dumps(schema) and profiles[0].name not in json.dumps(schema)


def test_sim_reward_replays_in_the_trees_world_whatever_the_trainer_seed(params: Params) -> None:
    from easy_core.core.clock import DiscreteEventClock, run_synchronously
    from easy_core.learning.grpo import SimReward
    from easy_core.plans.prompting import plan_text
    from easy_core.policies import get_policy
    from easy_core.world.suites.sim import SimSuite

    seeded = params.model_copy(
        update={
            "grpo": params.grpo.model_copy(
                update={"tasks": 2, "seed": 7, "reward_worlds": 1, "continuation": "greedy"}
            ),
            "rollouts": params.rollouts.model_copy(update={"seed": 3}),
        }
    )
    reward = SimReward(seeded)
    task = next(SimSuite(params.sim).tasks("train", 1, 3))
    assert reward.tasks[0] == task
    greedy = run_synchronously(
        reward.runner.run(task, get_policy("greedy"), 3, DiscreteEventClock())
    )
    first = plan_text(greedy.milestones[0].plan)
    assert reward.score(first, 0, []) == pytest.approx(greedy.reward.total)


@pytest.mark.parametrize("loss_tokens", ["all", "executors"])
def test_grpo_takes_a_real_step_on_tree_prompts(
    checkpoint, params: Params, tmp_path, loss_tokens: str
) -> None:
    """One real TRL step, training all completion tokens or the executor names only (TRL's
    env_mask; a group whose plans never reach an executor trains nothing, without NaN)."""
    from easy_core.learning.grpo import train_grpo

    out, _ = checkpoint
    small = params.model_copy(
        update={
            "grpo": params.grpo.model_copy(
                update={
                    "base_model": str(out),
                    "tasks": 1,
                    "max_steps": 1,
                    "max_completion_length": 24,
                    "loss_tokens": loss_tokens,
                    "executor_temperature": 3.0,
                }
            )
        }
    )
    metrics = train_grpo(small, tmp_path / "grpo")
    assert (tmp_path / "grpo" / "model.safetensors").is_file()
    assert "GRPO" in (tmp_path / "grpo" / "README.md").read_text()
    curve = json.loads((tmp_path / "grpo" / "curve.json").read_text())
    assert [c["step"] for c in curve] == [1]
    # 24 tokens cannot hold a plan: every completion of the group scored 0
    assert metrics["last_reward"] == 0.0 and metrics["group_size"] == small.rollouts.tree_k
    assert all(math.isfinite(c["loss"]) for c in curve)


def test_the_gpu_profile_differs_from_the_cpu_default_only_in_training() -> None:
    from easy_core.core.params import load_params
    from tests.conftest import ROOT

    cpu = load_params(ROOT / "params.yaml").model_dump()
    gpu = load_params(ROOT / "params.gpu.yaml").model_dump()
    assert {k for k in cpu if cpu[k] != gpu[k]} == {"sft", "grpo", "orchestrator"}
    assert gpu["grpo"]["use_vllm"] and gpu["orchestrator"]["backend"] == "openai"


def test_sim_reward_averages_a_root_plan_over_worlds(params: Params) -> None:
    from easy_core.core.clock import DiscreteEventClock, run_synchronously
    from easy_core.learning.grpo import ScriptedPolicy, SimReward
    from easy_core.plans.prompting import plan_text
    from easy_core.policies import get_policy

    worlds = params.model_copy(
        update={
            "grpo": params.grpo.model_copy(
                update={"tasks": 1, "reward_worlds": 3, "continuation": "greedy"}
            )
        }
    )
    reward = SimReward(worlds)
    task = reward.tasks[0]
    greedy = run_synchronously(
        reward.runner.run(task, get_policy("greedy"), 0, DiscreteEventClock())
    )
    first = plan_text(greedy.milestones[0].plan)
    expected = [
        run_synchronously(
            reward.runner.run(task, ScriptedPolicy([first]), seed, DiscreteEventClock())
        ).reward.total
        for seed in (0, 1, 2)
    ]
    assert len(set(expected)) > 1  # the worlds differ: averaging is not a no-op here
    assert reward.score(first, 0, []) == pytest.approx(sum(expected) / 3)
    assert reward.score(first, 0, [first]) == pytest.approx(  # an inner node: its own world
        run_synchronously(
            reward.runner.run(task, ScriptedPolicy([first, first]), 0, DiscreteEventClock())
        ).reward.total
    )


def test_the_reward_continuation_can_leave_out_retries(params: Params) -> None:
    """A first plan on the cheapest executors leaves doubted results: `greedy` as continuation
    retries them on stronger executors (and makes the cheap plan look good), `greedy-once`
    answers at once, as the orchestrator under its task grammar must."""
    from easy_core.core.clock import DiscreteEventClock, run_synchronously
    from easy_core.learning.grpo import SimReward
    from easy_core.plans.prompting import plan_text
    from easy_core.plans.validation import parse_plan
    from easy_core.policies import get_policy

    def scorer(continuation: str) -> SimReward:
        grpo = params.grpo.model_copy(update={"tasks": 6, "continuation": continuation})
        return SimReward(params.model_copy(update={"grpo": grpo}))

    retrying, once = scorer("greedy"), scorer("greedy-once")
    differ = 0
    for index, task in enumerate(once.tasks):
        greedy_first = plan_text(
            run_synchronously(once.runner.run(task, get_policy("greedy"), 0, DiscreteEventClock()))
            .milestones[0]
            .plan
        )
        plan = parse_plan(greedy_first)
        cheap = plan.model_copy(
            update={"steps": [s.model_copy(update={"executor": "sim-xs"}) for s in plan.steps]}
        )
        text = plan_text(cheap)
        differ += retrying.score(text, index, []) > once.score(text, index, [])
    assert differ >= 1


def test_an_unknown_continuation_fails_before_training(params: Params) -> None:
    from easy_core.learning.grpo import SimReward

    bad = params.model_copy(
        update={"grpo": params.grpo.model_copy(update={"continuation": "greedy-twice"})}
    )
    with pytest.raises(ConfigError, match="unknown policy 'greedy-twice'.*greedy-once"):
        SimReward(bad)


def test_grpo_samples_each_group_under_its_prompts_plan_schema(params: Params) -> None:
    from types import SimpleNamespace

    from easy_core.executors.hf_models import load_causal_lm
    from easy_core.learning.grpo import SimReward, StructuredRollout, tree_prompts
    from easy_core.plans.structured import executor_token_mask
    from easy_core.plans.validation import parse_plan
    from tests.test_structured import short_plan_schema

    small = params.model_copy(update={"grpo": params.grpo.model_copy(update={"tasks": 2})})
    rows = [r for r in tree_prompts(small) if r["prefix"] == "[]"]
    rows = [next(r for r in rows if r["task_index"] == i) for i in (0, 1)]
    for row in rows:
        row["schema"] = json.dumps(short_plan_schema(json.loads(row["schema"]), max_steps=2))
    rollout = StructuredRollout(
        rows, max_new_tokens=120, temperature=1.0, executor_temperature=3.0, executors_only=True
    )
    model, tokenizer = load_causal_lm("smollm2-135m")  # the untrained base: prose when free
    trainer = SimpleNamespace(model=model, processing_class=tokenizer)
    prompts = [rows[0]["prompt"], rows[0]["prompt"], rows[1]["prompt"]]
    out = rollout(prompts, trainer)
    assert len(out["prompt_ids"]) == len(out["completion_ids"]) == 3 and out["logprobs"] is None
    names = {e.name for e in load_pool_config(SIM_DEFAULT).executors}
    reward = SimReward(small)
    groups = [rows[0], rows[0], rows[1]]
    for ids, row, mask in zip(out["completion_ids"], groups, out["env_mask"], strict=True):
        assert ids[-1] == tokenizer.eos_token_id  # ended, not cut
        plan = parse_plan(tokenizer.decode(ids, skip_special_tokens=True))
        assert mask == executor_token_mask(tokenizer, ids) and 0 < sum(mask) < len(ids)
        task = reward.tasks[row["task_index"]]
        # what the schema guarantees (a duplicated step id is left to the validator)
        assert plan.steps and len(plan.steps) <= 2 and plan.final_answer is None
        for step in plan.steps:
            assert step.executor in names and step.id not in step.depends_on
            assert set(step.covers) <= set(task.subtask_index)


def test_renamed_pools_show_other_names_and_score_as_the_training_pool(params: Params) -> None:
    from easy_core.learning.grpo import SimReward, rename_executors, tree_prompts

    grpo = {"tasks": 2, "renamed_pools": 1, "reward_worlds": 1}
    small = params.model_copy(update={"grpo": params.grpo.model_copy(update=grpo)})
    rows = [r for r in tree_prompts(small) if r["prefix"] == "[]"]
    originals = {e.name for e in load_pool_config(SIM_DEFAULT).executors}
    plain = [r for r in rows if r["names"] == "{}"]
    renamed = [r for r in rows if r["names"] != "{}"]
    assert len(plain) == len(renamed) == 2
    reward = SimReward(small)
    for row in renamed:
        names = json.loads(row["names"])
        assert set(names.values()) == originals and not set(names) & originals
        cards = row["prompt"][0]["content"]
        assert not any(name in cards for name in originals)
        assert all(name in cards for name in names)
        shown_order = [line.split(" ")[1] for line in cards.splitlines() if line.startswith("- ")]
        assert sorted(shown_order) == sorted(names)
        schema_text = row["schema"]
        assert all(name in schema_text for name in names) and "sim-xl" not in schema_text
        # the same plan under the shown names earns the training pool's reward
        first = reward.first_plan("greedy", row["task_index"])
        shown = rename_executors(first, {v: k for k, v in names.items()})
        assert shown != first and rename_executors(shown, names) == first
        scores = reward(
            prompts=[row["prompt"]],
            completions=[shown],
            task_index=[row["task_index"]],
            prefix=["[]"],
            names=[row["names"]],
        )
        assert scores == [pytest.approx(reward.score(first, row["task_index"], []))]
    # two tasks, two different renamings (seeded per task)
    assert renamed[0]["names"] != renamed[1]["names"]


def test_fresh_names_hide_every_remembered_name_from_grpo_prompts(params: Params) -> None:
    """grpo.fresh_names: the training pool's roots and the drawn pools are shown under names
    drawn afresh (no word of the short list, no sim-* name), the reward maps the training
    pool's names back, and prompts below the roots (whose prefix names sim-*) are left out."""
    from easy_core.learning.grpo import SimReward, rename_executors, tree_prompts
    from easy_core.world.random_pools import NAME_WORDS

    grpo = {"tasks": 2, "random_pools": 1, "reward_worlds": 1, "fresh_names": True,
            "tree_depth": 2}  # fmt: skip
    small = params.model_copy(update={"grpo": params.grpo.model_copy(update=grpo)})
    rows = tree_prompts(small)
    assert len(rows) == 4 and all(r["prefix"] == "[]" for r in rows)
    originals = {e.name for e in load_pool_config(SIM_DEFAULT).executors}
    reward = SimReward(small)
    for row in rows:
        cards = row["prompt"][0]["content"]
        shown = [line.split(" ")[1] for line in cards.splitlines() if line.startswith("- ")]
        assert not any(name in cards for name in originals) and "sim-" not in row["schema"]
        assert not any(name.split("-")[0] in NAME_WORDS for name in shown)
        if row["pool"]:
            continue
        names = json.loads(row["names"])
        assert sorted(names) == sorted(shown) and set(names.values()) == originals
        first = reward.first_plan("greedy", row["task_index"])
        scores = reward(
            prompts=[row["prompt"]],
            completions=[rename_executors(first, {v: k for k, v in names.items()})],
            task_index=[row["task_index"]],
            prefix=["[]"],
            names=[row["names"]],
        )
        assert scores == [pytest.approx(reward.score(first, row["task_index"], []))]
        assert scores[0] != 0


def test_drawn_pools_show_their_cards_and_score_in_their_own_world(params: Params) -> None:
    from easy_core.core.schemas import PoolConfig
    from easy_core.executors.hf_models import load_causal_lm
    from easy_core.learning.grpo import SimReward, add_guides, tree_prompts

    grpo = {"tasks": 2, "random_pools": 2, "reward_worlds": 1, "guide": ["greedy"],
            "max_completion_length": 1024}  # fmt: skip
    small = params.model_copy(update={"grpo": params.grpo.model_copy(update=grpo)})
    rows = [r for r in tree_prompts(small) if r["prefix"] == "[]"]
    drawn = [r for r in rows if r["pool"]]
    assert len(drawn) == 4 and len(rows) == 6
    assert len({r["pool"] for r in drawn}) == 4  # seeded per task and variant
    reward = SimReward(small)
    _, tokenizer = load_causal_lm("smollm2-135m")
    assert add_guides(small, rows, reward, tokenizer) == rows
    for row in drawn:
        names = {e.name for e in PoolConfig.model_validate_json(row["pool"]).executors}
        cards = row["prompt"][0]["content"]
        shown = {line.split(" ")[1] for line in cards.splitlines() if line.startswith("- ")}
        assert shown == names and "sim-xl" not in row["schema"]
        # greedy read the drawn cards: its plan names the drawn executors and scores there
        steps = json.loads(row["guide"])["steps"]
        assert steps and {s["executor"] for s in steps} <= names
        score = reward(
            prompts=[row["prompt"]],
            completions=[row["guide"]],
            task_index=[row["task_index"]],
            prefix=["[]"],
            pool=[row["pool"]],
        )
        assert score[0] > 0
        assert reward.score(row["guide"], row["task_index"], []) == 0  # not the training pool's


def test_guided_groups_end_with_the_best_guide_plan(params: Params) -> None:
    """Off-policy guidance: each root row carries the best of the guide policies' first plans
    under the row's names (a plan its schema allows), and it takes the last place of the
    row's group in the rollout; the reward hook logs the policy's own samples apart."""
    from types import SimpleNamespace

    from easy_core.executors.hf_models import load_causal_lm
    from easy_core.learning.grpo import (
        SimReward,
        StructuredRollout,
        add_guides,
        rename_executors,
        tree_prompts,
    )
    from easy_core.plans.structured import schema_accepts
    from tests.test_structured import short_plan_schema

    grpo = {
        "tasks": 1,
        "renamed_pools": 1,
        "guide": ["cheapest", "strongest"],
        "max_completion_length": 1024,
    }
    small = params.model_copy(update={"grpo": params.grpo.model_copy(update=grpo)})
    rows = [r for r in tree_prompts(small) if r["prefix"] == "[]"]
    reward = SimReward(small)
    model, tokenizer = load_causal_lm("smollm2-135m")
    cramped = small.model_copy(
        update={"grpo": small.grpo.model_copy(update={"max_completion_length": 40})}
    )
    assert add_guides(cramped, rows, reward, tokenizer) == []  # guides would be cut: no signal
    assert add_guides(small, rows, reward, tokenizer) == rows
    assert all(row["guide"] for row in rows)
    plain, renamed = rows
    firsts = [reward.first_plan(name, 0) for name in ("cheapest", "strongest")]
    assert plain["guide"] == max(firsts, key=lambda text: reward.score(text, 0, []))
    assert rename_executors(renamed["guide"], json.loads(renamed["names"])) == plain["guide"]
    for row in rows:
        ids = tokenizer.encode(row["guide"], add_special_tokens=False)
        assert schema_accepts(tokenizer, json.loads(row["schema"]), ids)
        assert not schema_accepts(tokenizer, json.loads(row["schema"]), ids[:-3])
        row["schema"] = json.dumps(short_plan_schema(json.loads(row["schema"]), max_steps=1))
    rollout = StructuredRollout(rows, max_new_tokens=80, temperature=1.0)
    trainer = SimpleNamespace(model=model, processing_class=tokenizer)
    prompts = [plain["prompt"]] * 2 + [renamed["prompt"]] * 2
    out = rollout(prompts, trainer)
    assert out["guided"] == [False, True, False, True]
    for i, row in ((1, plain), (3, renamed)):
        ids = out["completion_ids"][i]
        assert ids[-1] == tokenizer.eos_token_id
        assert tokenizer.decode(ids, skip_special_tokens=True) == row["guide"]
    texts = [tokenizer.decode(ids, skip_special_tokens=True) for ids in out["completion_ids"]]
    scores = reward(
        prompts=prompts,
        completions=texts,
        task_index=[0] * 4,
        prefix=["[]"] * 4,
        names=[r["names"] for r in (plain, plain, renamed, renamed)],
        guided=out["guided"],
    )
    assert scores[1] == pytest.approx(scores[3])  # one plan under two sets of names
    assert reward.log[-1]["guide_reward"] == pytest.approx(scores[1])
    assert reward.log[-1]["policy_reward"] == pytest.approx((scores[0] + scores[2]) / 2)


def test_checkpoints_compare_on_the_same_tasks(checkpoint, params: Params, tmp_path) -> None:
    from easy_core.evaluation.checkpoint_comparison import (
        compare_checkpoints,
        comparison_markdown,
        comparison_plot,
    )

    out, _ = checkpoint
    short = params.model_copy(
        update={"orchestrator": params.orchestrator.model_copy(update={"max_new_tokens": 24})}
    )
    result = compare_checkpoints(
        short, SIM_DEFAULT, {"a": str(out), "b": str(out)}, ["greedy"], n=3, seed=0
    )
    assert [r["name"] for r in result["rows"]] == ["a", "b", "greedy"]
    assert all(r["n"] == 3 for r in result["rows"])
    difference = result["difference"]
    assert difference["of"] == "b" and difference["against"] == "a"
    assert difference["mean_reward"] == 0.0 and difference["ci95"] == (0.0, 0.0)
    assert difference["tasks_better"] == difference["tasks_worse"] == 0
    greedy = result["rows"][2]
    assert greedy["mean_reward"] > result["rows"][0]["mean_reward"]  # 24 tokens hold no plan
    [against_greedy] = result["against_baselines"]
    assert against_greedy["of"] == "b" and against_greedy["against"] == "greedy"
    assert against_greedy["mean_reward"] == pytest.approx(
        result["rows"][1]["mean_reward"] - greedy["mean_reward"]
    )
    assert against_greedy["ci95"][1] < 0 and against_greedy["tasks_better"] == 0
    assert result["split"] == "test"
    text = comparison_markdown(result)
    assert "+0.000" in text and "b - greedy" in text
    assert comparison_plot([result], tmp_path / "c.png").stat().st_size > 1000


def test_the_checkpoint_chosen_on_validation_has_the_best_reward_over_the_pools() -> None:
    """b loses on one pool and wins on average; a tie keeps the earlier checkpoint; the
    baselines are not candidates however well they do."""
    from easy_core.evaluation.checkpoint_comparison import choice_markdown, choose_checkpoint

    def pool(a: float, b: float) -> dict:
        rows = [
            {"name": "a", "model": "models/a", "mean_reward": a},
            {"name": "b", "model": "models/b", "mean_reward": b},
            {"name": "oracle", "model": None, "mean_reward": 9.0},
        ]
        return {"split": "validation", "rows": rows}

    choice = choose_checkpoint([pool(1.0, 0.9), pool(0.5, 0.8)])
    assert choice["chosen"] == "b" and choice["split"] == ["validation"]
    assert choice["mean_reward_over_pools"] == pytest.approx({"a": 0.75, "b": 0.85})
    assert "**b**" in choice_markdown(choice)
    assert choose_checkpoint([pool(1.0, 0.5), pool(0.5, 1.0)])["chosen"] == "a"
    with pytest.raises(ValueError, match="--model"):
        choose_checkpoint([{"split": "validation", "rows": [pool(1, 1)["rows"][2]]}])


def test_a_comparison_reuses_its_evaluations_until_a_checkpoint_changes(
    checkpoint, params: Params, tmp_path, monkeypatch
) -> None:
    """The second comparison runs no episode; retraining the checkpoint in place (here: its
    config changes) redoes its evaluation only, and a new model card alone redoes nothing."""
    import shutil

    from easy_core.evaluation import evaluator as evaluation
    from easy_core.evaluation.checkpoint_comparison import compare_checkpoints

    model = tmp_path / "model"
    shutil.copytree(checkpoint[0], model)
    short = params.model_copy(
        update={"orchestrator": params.orchestrator.model_copy(update={"max_new_tokens": 24})}
    )
    played: list[str] = []
    real_run = evaluation.run_episodes

    def counting(tasks, runner, policy_name, *args, **kwargs):
        played.append(policy_name)
        return real_run(tasks, runner, policy_name, *args, **kwargs)

    monkeypatch.setattr(evaluation, "run_episodes", counting)

    def compare() -> dict:
        runs = tmp_path / "runs"
        return compare_checkpoints(
            short, SIM_DEFAULT, {"m": str(model)}, ["greedy"], 3, 0, None, runs
        )

    first = compare()
    assert played == ["easy", "greedy"]
    assert compare() == first and played == ["easy", "greedy"]
    (model / "README.md").write_text("a new card")
    assert compare() == first and played == ["easy", "greedy"]
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "retrained": True}))
    assert compare() == first and played == ["easy", "greedy", "easy"]


def test_grpo_signal_scores_sampled_groups_with_the_reward_hook(
    checkpoint, params: Params, monkeypatch
) -> None:
    """Groups that all sample greedy's first plan are worth what that plan is worth and carry
    no contrast; groups too short to hold a plan score 0."""
    from easy_core.learning import group_signal as signal

    small = params.model_copy(
        update={"grpo": params.grpo.model_copy(update={"tasks": 3, "max_completion_length": 24})}
    )
    out, _ = checkpoint
    short = signal.group_signal(small, out, n_prompts=2)
    assert short["prompts"] == 2 and short["group_size"] == small.rollouts.tree_k
    assert short["mean_reward"] == short["sample_success"] == short["groups_with_contrast"] == 0
    assert short["greedy_first_plan_mean_reward"] > 0

    from easy_core.core.clock import DiscreteEventClock, run_synchronously
    from easy_core.plans.prompting import plan_text
    from easy_core.policies import get_policy

    reward = signal.SimReward(small)
    roots = [r["task_index"] for r in signal.tree_prompts(small) if r["prefix"] == "[]"]
    groups: list[int] = []

    def greedy_plans(
        model,
        tokenizer,
        prompts,
        schemas,
        max_new_tokens,
        temperature,
        executor_temperature,
        copies=1,
    ):
        assert executor_temperature == small.grpo.executor_temperature
        task = reward.tasks[roots[len(groups)]]
        groups.append(len(prompts) * copies)
        episode = reward.runner.run(task, get_policy("greedy"), reward.seed, DiscreteEventClock())
        text = plan_text(run_synchronously(episode).milestones[0].plan)
        return [tokenizer.encode(text) for _ in range(len(prompts) * copies)]

    monkeypatch.setattr(signal, "generate_ids", greedy_plans)
    same = signal.group_signal(small, out, n_prompts=2)
    assert same["mean_reward"] == pytest.approx(same["greedy_first_plan_mean_reward"])
    assert same["sample_success"] == pytest.approx(same["greedy_first_plan_success"])
    assert same["groups_with_contrast"] == 0 and groups == [small.rollouts.tree_k] * 2


def test_fresh_names_rename_the_cards_and_every_executor_the_teacher_named(
    params: Params,
) -> None:
    """sft_data.fresh_names: the cards come under new names in shuffled order, and plans,
    results and the rendered history name the same executor by the same new name."""
    import random

    from easy_core.executors.pool import load_pool
    from easy_core.learning.teacher_data import under_fresh_names
    from easy_core.plans.prompting import render_messages
    from easy_core.policies.batch import run_episodes
    from easy_core.runtime.episode import EpisodeRunner
    from easy_core.world.suites.sim import SimSuite

    pool = load_pool(SIM_DEFAULT, params)
    tasks = list(SimSuite(params.sim).tasks("train", 3, 0))
    runner = EpisodeRunner(pool, params, SimSuite.check)
    for task, trajectory in zip(tasks, run_episodes(tasks, runner, "greedy", 0), strict=True):
        cards, renamed = under_fresh_names(pool.profiles, trajectory, random.Random(task.id))
        shown = {card.name for card in cards}
        assert len(shown) == len(cards) and not shown & set(pool.executors)

        def unnamed(profile):
            return profile.model_copy(update={"name": ""})

        name_of = {original: card.name for card in cards for original in pool.executors
                   if unnamed(card) == unnamed(pool.profile(original))}  # fmt: skip
        assert len(name_of) == len(cards)
        for old, new in zip(trajectory.milestones, renamed.milestones, strict=True):
            steps = zip(old.plan.steps, new.plan.steps, strict=True)
            results = zip(old.results, new.results, strict=True)
            for before, after in [*steps, *results]:
                assert name_of[before.executor] == after.executor
        history = render_messages(task, cards, renamed.milestones)
        text = history[0]["content"] + history[1]["content"]
        assert not [name for name in pool.executors if f"{name} " in text or f"[{name}," in text]
        assert renamed.correct == trajectory.correct


def test_subtask_estimates_list_each_subtasks_success_per_executor_cheapest_first(
    params: Params, tmp_path: Path
) -> None:
    """orchestrator.subtask_estimates: under the task, one line per subtask with every
    executor's expected success (the capability model greedy uses), cheapest first; the teacher
    data is written with it and records it, so SFT's checkpoint carries it in its contract."""
    from easy_core.core.capability import expected_success
    from easy_core.executors.pool import load_pool
    from easy_core.learning.teacher_data import write_teacher_dataset
    from easy_core.plans.prompting import render_messages
    from easy_core.world.suites.sim import SimSuite

    pool = load_pool(SIM_DEFAULT, params)
    task = next(iter(SimSuite(params.sim).tasks("validation", 1, 0)))
    slope = params.capability.difficulty_slope
    plain = render_messages(task, pool.profiles, [])[1]["content"]
    user = render_messages(task, pool.profiles, [], estimates_slope=slope)[1]["content"]
    assert "Expected success" not in plain and "Expected success" in user
    lines = user.split("cheapest executor first:\n")[1].split("\n\n")[0].splitlines()
    assert [line.split(":")[0] for line in lines] == [sub.id for sub in task.subtasks]
    prices = {p.name: p.price_in_per_1m + p.price_out_per_1m for p in pool.profiles}
    for sub, line in zip(task.subtasks, lines, strict=True):
        shown = [entry.rsplit(" ", 1) for entry in line.split(": ", 1)[1].split(", ")]
        assert sorted(name for name, _ in shown) == sorted(prices)
        assert [prices[name] for name, _ in shown] == sorted(prices.values())
        for name, rate in shown:
            expected = expected_success(pool.profile(name), sub.skill, sub.difficulty, slope)
            assert rate == f"{expected:.0%}"
    rates = {line.split(": ")[1] for line in lines}
    assert len(rates) > 1  # skills and difficulties move the estimates

    on = params.orchestrator.model_copy(update={"subtask_estimates": True})
    data = params.sft_data.model_copy(update={"n_tasks": 4, "real": []})
    settings = params.model_copy(update={"orchestrator": on, "sft_data": data})
    summary = write_teacher_dataset(settings, tmp_path / "sft")
    assert summary["subtask_estimates"] is True and summary["executor_last"] is False
    rows = [json.loads(line) for line in (tmp_path / "sft" / "train.jsonl").open()]
    assert rows and all("Expected success" in row["messages"][1]["content"] for row in rows)


def test_name_reading_measures_the_mass_a_grammar_over_the_pools_names_keeps(
    params: Params,
) -> None:
    """`easy bench name-reading`: the token beginnings of the pool's names are exactly those
    whose text starts a name, and the measured mass is a probability."""
    from easy_core.evaluation.name_reading import name_beginnings, name_reading
    from easy_core.executors.hf_models import load_causal_lm

    _, tokenizer = load_causal_lm("smollm2-135m")
    allowed = name_beginnings(tokenizer, ["sim-xl", "coder-7b"])
    pieces = {tokenizer.decode([i]) for i in allowed}
    assert {"s", "c"} <= pieces and "har" not in pieces and "" not in pieces
    assert all("sim-xl".startswith(p) or "coder-7b".startswith(p) for p in pieces)
    figures = name_reading(params, "smollm2-135m", SIM_DEFAULT, 1)
    assert figures["n"] == 1 and figures["executor_last"] is False
    assert 0.0 <= figures["mean_mass_on_pool_names"] <= 1.0
    assert len(figures["tasks"][0]["top_tokens"]) == 5
