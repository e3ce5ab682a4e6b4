"""On-policy Tree-GRPO inside TRL: the trees a step grows, the rows TRL trains on, and the
advantages its loss uses, which must be exactly the ones the tree defines."""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from easy_core.core.clock import run_synchronously
from easy_core.core.params import Params
from easy_core.learning.tree_grpo import TreeRollout, group_slots, on_policy_rows
from easy_core.learning.trees import TreeNode
from easy_core.plans.prompting import plan_text
from easy_core.policies import get_policy
from easy_core.policies.llm import chat_prompt_ids, turn_inputs
from tests.conftest import SIM_DEFAULT

pytest.importorskip("trl")

FIXED = ["cheapest", "strongest", "greedy"]  # the fixed batch's "samples", in sibling order


def fixed_sampler(model: Any, tokenizer: Any, cursors: list, n: int):
    """A deterministic stand-in for the model's sampling (a fixed batch): sibling j plays the
    turn policy FIXED[j] would, so the batch's rewards are real, non-zero and varied."""
    prompts, completions = [], []
    for cursor in cursors:
        messages, _ = turn_inputs(cursor.state)
        prompts.append(chat_prompt_ids(tokenizer, messages))
        for j in range(n):
            state = cursor.fork().state
            turn = run_synchronously(get_policy(FIXED[j % len(FIXED)]).act(state))
            text = turn if isinstance(turn, str) else plan_text(turn)
            ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
            completions.append(ids)
    return prompts, completions


def tree_params(params: Params, scope: str, **grpo: Any) -> Params:
    return params.model_copy(
        update={
            "rollouts": params.rollouts.model_copy(update={"pool": str(SIM_DEFAULT), "tree_k": 2}),
            "grpo": params.grpo.model_copy(
                update={
                    "base_model": "smollm2-135m",
                    "rollout": "on_policy",
                    "tree_depth": 2,
                    "advantage_scope": scope,
                    "continuation": "self",
                    "reward_worlds": 1,
                    "tasks": 2,
                    "max_steps": 1,
                    "prompts_per_step": 2,
                    **grpo,
                }
            ),
        }
    )


def expected_advantages(nodes: list[TreeNode], scope: str) -> dict[int, float]:
    """The tree's definition, written out again: value = mean leaf return of the subtree;
    advantage = (value - sibling mean) / (sibling std + 1e-6), plus for scope tree the same
    over every non-root node."""
    children: dict[int, list[int]] = {}
    for n in nodes:
        if n.parent is not None:
            children.setdefault(n.parent, []).append(n.id)

    def returns(i: int) -> list[float]:
        leaf = nodes[i].leaf
        if leaf is not None:
            return [leaf.reward.total]
        return [r for c in children.get(i, []) for r in returns(c)]

    value = {n.id: statistics.fmean(returns(n.id)) for n in nodes}

    def norm(ids: list[int]) -> dict[int, float]:
        vs = [value[i] for i in ids]
        mean, std = statistics.fmean(vs), statistics.pstdev(vs)
        return {i: (value[i] - mean) / (std + 1e-6) for i in ids}

    advantage = {n.id: 0.0 for n in nodes if n.parent is not None}
    groups = list(children.values()) + ([list(advantage)] if scope == "tree" else [])
    for group in groups:
        for i, a in norm(group).items():
            advantage[i] += a
    return advantage


@pytest.mark.parametrize("scope", ["siblings", "tree"])
def test_the_trainer_uses_exactly_the_advantages_the_tree_defines(
    params: Params, tmp_path, monkeypatch, scope: str
) -> None:
    import trl

    from easy_core.learning import tree_grpo

    small = tree_params(params, scope, tasks=1, prompts_per_step=1, beta=0.0)
    made: list[TreeRollout] = []

    def rollout(p: Params, rows: list) -> TreeRollout:
        made.append(TreeRollout(p, rows, sample=fixed_sampler))
        return made[-1]

    seen: list[dict[str, Any]] = []
    original = trl.GRPOTrainer._compute_loss

    def capture(self, model, inputs):
        seen.append({k: v.clone() for k, v in inputs.items() if hasattr(v, "clone")})
        return original(self, model, inputs)

    monkeypatch.setattr(tree_grpo, "TreeRollout", rollout)
    monkeypatch.setattr(trl.GRPOTrainer, "_compute_loss", capture)
    metrics = tree_grpo.train_tree_grpo(small, tmp_path / "grpo")

    trees = made[0].grown
    assert len(trees) == 1 and metrics["group_size"] == 2 and metrics["tree_depth"] == 2
    returns = [n.leaf.reward.total for t in trees for n in t.leaves if n.leaf is not None]
    assert len(set(round(r, 6) for r in returns)) > 1 and all(r != 0 for r in returns)
    # what the tree defines, keyed by (prompt, completion) of each sampled turn
    expected: dict[tuple, list[float]] = {}
    for tree in trees:
        advantage = expected_advantages(tree.nodes, scope)
        for node_id, (prompt, completion) in tree.turns.items():
            assert tree.nodes[node_id].advantage == pytest.approx(advantage[node_id], abs=1e-9)
            expected.setdefault((tuple(prompt), tuple(completion)), []).append(advantage[node_id])
    assert any(abs(a) > 0.1 for values in expected.values() for a in values)
    # what TRL's loss was handed, row by row (TRL shuffles rows; pairs stay together)
    batch = seen[0]
    rows = batch["advantages"].shape[0]
    assert rows == 2 * group_slots(2, 2)
    used = []
    for r in range(rows):
        prompt = batch["prompt_ids"][r][batch["prompt_mask"][r].bool()].tolist()
        completion = batch["completion_ids"][r][batch["completion_mask"][r].bool()].tolist()
        used.append(((tuple(prompt), tuple(completion)), batch["advantages"][r].item()))
    sampled = [(key, a) for key, a in used if key in expected]
    assert len(sampled) == sum(len(t.turns) for t in trees)
    for key, advantage in sampled:
        assert min(abs(advantage - a) for a in expected[key]) < 1e-4
    # every other row is a padded slot: no advantage
    assert all(a == 0.0 for key, a in used if key not in expected)


def test_an_early_answer_leaves_padded_slots_and_each_task_keeps_its_rows(
    params: Params,
) -> None:
    from easy_core.executors.hf_models import load_causal_lm

    small = tree_params(params, "siblings", tasks=3, tree_depth=3, continuation="greedy-once")
    rows = on_policy_rows(small)
    slots = group_slots(2, 3)
    assert slots == 7 and len(rows) == 3 * slots
    assert all(len({r["task_index"] for r in rows[i : i + slots]}) == 1 for i in (0, 7, 14))
    rollout = TreeRollout(small, rows, sample=fixed_sampler)
    _, tokenizer = load_causal_lm("smollm2-135m", 1)
    tree = rollout.grow(None, tokenizer, [rows[0]["task_index"]])[0]
    out = rollout.rows([tree], tokenizer)
    assert len(out["completion_ids"]) == 2 * slots
    padded = [i for i, value in enumerate(out["tree_value"]) if value is None]
    # cheapest/strongest/greedy answer once their milestone is done: depth 3 is never reached
    assert padded and all(out["env_mask"][i] == [0] for i in padded)
    assert len(padded) == 2 * slots - len(tree.turns)
    assert tree.tokens() < tree.path_tokens()


def test_trees_are_grown_by_the_model_itself(params: Params) -> None:
    """The default sampler: the packaged model samples under each turn's plan schema."""
    from easy_core.executors.hf_models import load_causal_lm

    small = tree_params(
        params, "siblings", tasks=1, tree_depth=1, continuation="greedy-once",
        max_completion_length=48,
    )  # fmt: skip
    rollout = TreeRollout(small, on_policy_rows(small))
    model, tokenizer = load_causal_lm("smollm2-135m", 2)
    tree = rollout.grow(model, tokenizer, [0])[0]
    assert len(tree.turns) == 2
    for prompt, completion in tree.turns.values():
        assert 0 < len(completion) <= 48 and prompt == tree.turns[1][0]
    assert all(n.leaf is not None for n in tree.nodes[1:])
