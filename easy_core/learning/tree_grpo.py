"""On-policy Tree-GRPO: every training step grows its tasks' trees with the model being trained,
inside TRL's GRPOTrainer (its `rollout_func`), and every sibling group is a GRPO group.

A task's tree: at each decision (an orchestrator turn: the next milestone's plan, or the answer)
down to depth `grpo.tree_depth`, K = `rollouts.tree_k` samples of the model under the turn's plan
schema. Each sample is played in the simulator on a fork of its parent's episode, so siblings
share their prefix, its generated turns and its executed steps. Below the last branching depth a
branch runs on to the end with one sample of the model (`grpo.continuation: self`) or a named
policy. A sample's reward is the mean return of the leaves below it (its node's value,
`trees.assign_values`); its advantage is that value against its siblings', plus with
`grpo.advantage_scope: tree` against every sample of the tree.

TRL's batch has a fixed shape and a tree does not (a branch that answers early has no decision
below it). So the dataset holds, per task, one row per sibling group a full tree would have
(1 + K + ... + K^(D-1), breadth first), which TRL's sampler repeats K times (`num_generations`
= K, no shuffling): a step trains `grpo.prompts_per_step` whole trees. The group of a decision
that never came is padding: no tokens in the loss (TRL's `env_mask`), no reward.
`TreeGRPOTrainer` hands TRL's own loss the tree's advantages in place of rewards re-normalised
per run of K rows; that is the only thing it changes.
"""

from __future__ import annotations

import random
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from easy_core.core.clock import DiscreteEventClock, run_synchronously
from easy_core.core.errors import ConfigError
from easy_core.core.params import Params
from easy_core.executors.pool import load_pool
from easy_core.learning.checkpoints import (
    grpo_trainable_copy,
    publish_checkpoint,
    staging_dir,
    trainer_args,
    write_report,
)
from easy_core.learning.trees import TreeNode, assign_values
from easy_core.plans.prompting import orchestrator_messages
from easy_core.plans.structured import executor_token_mask
from easy_core.policies import get_policy
from easy_core.policies.llm import chat_prompt_ids, generate_ids, record_answer, turn_inputs
from easy_core.runtime.episode import EpisodeCursor, EpisodeRunner
from easy_core.runtime.policy import EpisodeState
from easy_core.world.suites.sim import SimSuite

# (model, tokenizer, cursors, n) -> (each cursor's prompt ids, n completions per cursor in order)
Sampler = Callable[[Any, Any, list[EpisodeCursor], int], tuple[list[list[int]], list[list[int]]]]


def group_slots(k: int, depth: int) -> int:
    """Sibling groups of a full tree: one per decision node above `depth`."""
    return sum(k**d for d in range(depth))


class FixedTurn:
    """Plays one given answer of the model (its text and generated token count)."""

    name = "easy"
    synchronous = True

    def __init__(self, text: str, tokens: int):
        self.text, self.tokens = text, tokens

    async def act(self, state: EpisodeState) -> str:
        return record_answer(state, self.text, self.tokens)


@dataclass
class GrownTree:
    """One task's tree of a step: its nodes (values and advantages assigned), the sampled turn
    that led to each non-root node, and each node's position in the full K-ary tree
    (breadth-first: the children of position p are K*p + 1 ... K*p + K)."""

    task_index: int
    nodes: list[TreeNode]
    turns: dict[int, tuple[list[int], list[int]]] = field(default_factory=dict)
    positions: dict[int, int] = field(default_factory=dict)

    @property
    def leaves(self) -> list[TreeNode]:
        return [n for n in self.nodes if n.leaf is not None]

    def tokens(self) -> int:
        """Orchestrator tokens the tree generated (each shared prefix once)."""
        return sum(n.tokens for n in self.nodes)

    def path_tokens(self) -> int:
        """What independent rollouts of the same leaves generate: each leaf its whole path."""
        by_id = {n.id: n for n in self.nodes}
        total = 0
        for leaf in self.leaves:
            node: TreeNode | None = leaf
            while node is not None:
                total += node.tokens
                node = by_id[node.parent] if node.parent is not None else None
        return total


class TreeRollout:
    """TRL rollout hook: grows the batch's trees with `trainer.model` and returns one row per
    (sibling group slot, sibling), in the order of TRL's batch."""

    def __init__(self, params: Params, rows: list[dict[str, Any]], sample: Sampler | None = None):
        self.params = params
        self.sample = sample or self._sample
        config = params.grpo
        self.k, self.depth = params.rollouts.tree_k, config.tree_depth
        self.slots = group_slots(self.k, self.depth)
        self.scope, self.scale = config.advantage_scope, config.scale_rewards != "none"
        self.seed = params.rollouts.seed
        pool = load_pool(params.rollouts.pool, params)
        self.runner = EpisodeRunner(pool, params, SimSuite.check)
        self.runner.count_plan_tokens = True
        self.tasks = list(SimSuite(params.sim).tasks("train", config.tasks, self.seed))
        self.task_of = {_key(row["prompt"]): row["task_index"] for row in rows}
        self.continuation = None if config.continuation == "self" else config.continuation
        self.grown: list[GrownTree] = []  # the last call's trees
        self.steps: list[dict[str, float]] = []  # per call: tokens and leaves

    def __call__(self, prompts: list, trainer: Any) -> dict[str, Any]:
        import torch

        block = self.k * self.slots
        if len(prompts) % block:
            raise ConfigError(
                f"a Tree-GRPO batch holds whole trees of {block} rows; got {len(prompts)}"
            )
        indices = []
        for start in range(0, len(prompts), block):
            keys = {_key(p) for p in prompts[start : start + block]}
            if len(keys) != 1:
                raise ConfigError("a Tree-GRPO batch mixes tasks within one tree's rows")
            indices.append(self.task_of[keys.pop()])
        torch.manual_seed(
            zlib.crc32(f"{self.params.grpo.seed}/{trainer.state.global_step}".encode())
        )
        tokenizer = trainer.processing_class
        self.grown = self.grow(trainer.model, tokenizer, indices)
        return self.rows(self.grown, tokenizer)

    def _sample(
        self, model: Any, tokenizer: Any, cursors: list[EpisodeCursor], n: int
    ) -> tuple[list[list[int]], list[list[int]]]:
        """`n` sampled turns for each cursor's state, in one batch: (prompts, completions)."""
        inputs = [turn_inputs(c.state) for c in cursors]
        prompts = [chat_prompt_ids(tokenizer, messages) for messages, _ in inputs]
        config = self.params.grpo
        completions = generate_ids(
            model,
            tokenizer,
            prompts,
            [schema for _, schema in inputs],
            config.max_completion_length,
            config.temperature,
            config.executor_temperature,
            copies=n,
        )
        return prompts, completions

    def grow(self, model: Any, tokenizer: Any, task_indices: list[int]) -> list[GrownTree]:
        trees: list[GrownTree] = []
        frontier: list[tuple[GrownTree, TreeNode, EpisodeCursor]] = []
        for index in task_indices:
            cursor = self.runner.start(self.tasks[index], self.seed, DiscreteEventClock())
            root = TreeNode(id=0, parent=None, depth=0, branch="r", tokens=0)
            tree = GrownTree(index, [root], positions={0: 0})
            trees.append(tree)
            frontier.append((tree, root, cursor))
        running: list[tuple[TreeNode, EpisodeCursor]] = []
        while frontier:  # one depth of every tree per batch
            prompts, completions = self.sample(
                model, tokenizer, [cursor for _, _, cursor in frontier], self.k
            )
            below = []
            for i, (tree, node, cursor) in enumerate(frontier):
                for j in range(self.k):
                    ids = completions[i * self.k + j]
                    child = cursor.fork()
                    milestones = len(child.state.milestones)
                    text = tokenizer.decode(ids, skip_special_tokens=True)
                    run_synchronously(child.turn(FixedTurn(text, len(ids))))
                    grown = TreeNode(
                        id=len(tree.nodes),
                        parent=node.id,
                        depth=node.depth + 1,
                        branch=f"{node.branch}.{j}",
                        tokens=len(ids),
                        decision=(
                            child.state.milestones[-1].plan.milestone
                            if len(child.state.milestones) > milestones
                            else (child.end_reason or "repair")
                        ),
                    )
                    tree.nodes.append(grown)
                    tree.positions[grown.id] = self.k * tree.positions[node.id] + 1 + j
                    tree.turns[grown.id] = (prompts[i], ids)
                    if child.ended:
                        grown.leaf = child.trajectory("easy")
                    elif grown.depth < self.depth:
                        below.append((tree, grown, child))
                    else:
                        running.append((grown, child))
            frontier = below
        self._finish(model, tokenizer, running)
        for tree in trees:
            assign_values(tree.nodes, self.scope, self.scale)
        self.steps.append(
            {
                "trees": float(len(trees)),
                "leaves": float(sum(len(t.leaves) for t in trees)),
                "tokens": float(sum(t.tokens() for t in trees)),
                "path_tokens": float(sum(t.path_tokens() for t in trees)),
                "samples": float(sum(len(t.turns) for t in trees)),
                "informative": float(
                    sum(abs(t.nodes[i].advantage) > 1e-9 for t in trees for i in t.turns)
                ),
                "leaf_return": float(
                    sum(n.leaf.reward.total for t in trees for n in t.leaves if n.leaf is not None)
                ),
            }
        )
        return trees

    def _finish(
        self, model: Any, tokenizer: Any, running: list[tuple[TreeNode, EpisodeCursor]]
    ) -> None:
        """Every branch below the branching depth on to its end: one sample of the model per
        turn (batched across branches), or the continuation policy."""
        if self.continuation is not None:
            policy = get_policy(self.continuation)
            for node, cursor in running:
                before = sum(cursor.turn_tokens)
                while run_synchronously(cursor.turn(policy)):
                    pass
                node.tokens += sum(cursor.turn_tokens) - before
                node.leaf = cursor.trajectory("easy")
            return
        self._sample_to_end(model, tokenizer, running)

    def _sample_to_end(
        self, model: Any, tokenizer: Any, running: list[tuple[TreeNode, EpisodeCursor]]
    ) -> None:
        while running:
            _, completions = self.sample(model, tokenizer, [c for _, c in running], 1)
            still = []
            for (node, cursor), ids in zip(running, completions, strict=True):
                text = tokenizer.decode(ids, skip_special_tokens=True)
                node.tokens += len(ids)
                if run_synchronously(cursor.turn(FixedTurn(text, len(ids)))):
                    still.append((node, cursor))
                else:
                    node.leaf = cursor.trajectory("easy")
            running = still

    def independent_tokens(self, model: Any, tokenizer: Any, task_index: int, n: int) -> int:
        """Orchestrator tokens of `n` independent episodes of the task, each sampled from its
        root to its end as a tree's branch below the branching depth is (the baseline trees
        are measured against)."""
        running = []
        for j in range(n):
            cursor = self.runner.start(self.tasks[task_index], self.seed, DiscreteEventClock())
            node = TreeNode(id=j, parent=None, depth=0, branch=f"independent.{j}", tokens=0)
            running.append((node, cursor))
        self._sample_to_end(model, tokenizer, list(running))
        return sum(node.tokens for node, _ in running)

    def rows(self, trees: list[GrownTree], tokenizer: Any) -> dict[str, Any]:
        """TRL's rows: per tree, per group slot, per sibling; a slot whose decision never came
        is padding (the tree's root prompt, an end token outside the loss, no reward)."""
        out: dict[str, list[Any]] = {
            key: []
            for key in ("prompt_ids", "completion_ids", "env_mask", "tree_value", "tree_advantage")
        }
        executors_only = self.params.grpo.loss_tokens == "executors"
        for tree in trees:
            at = {position: node_id for node_id, position in tree.positions.items()}
            pad_prompt = chat_prompt_ids(tokenizer, self._root_messages(tree.task_index))
            for slot in range(self.slots):
                for j in range(self.k):
                    node_id = at.get(self.k * slot + 1 + j)
                    if node_id is None:
                        out["prompt_ids"].append(pad_prompt)
                        out["completion_ids"].append([tokenizer.eos_token_id])
                        out["env_mask"].append([0])
                        out["tree_value"].append(None)
                        out["tree_advantage"].append(0.0)
                        continue
                    prompt, completion = tree.turns[node_id]
                    node = tree.nodes[node_id]
                    out["prompt_ids"].append(prompt)
                    out["completion_ids"].append(completion)
                    out["env_mask"].append(
                        executor_token_mask(tokenizer, completion)
                        if executors_only
                        else [1] * len(completion)
                    )
                    out["tree_value"].append(node.value)
                    out["tree_advantage"].append(node.advantage)
        return {**out, "logprobs": None}

    def _root_messages(self, index: int) -> list[dict[str, str]]:
        return orchestrator_messages(
            self.runner.params, self.tasks[index], self.runner.pool.profiles, []
        )


class TreeValue:
    """TRL reward hook: a sample's reward is its node's value, which the rollout computed."""

    __name__ = "tree_value"

    def __call__(self, prompts: list, completions: list, tree_value: list, **_: Any) -> list:
        return list(tree_value)


def on_policy_rows(params: Params) -> list[dict[str, Any]]:
    """The dataset: per training task (in an order drawn from grpo.seed), one row per sibling
    group slot of a full tree, all with the task's root prompt."""
    config = params.grpo
    pool = load_pool(params.rollouts.pool, params)
    tasks = list(SimSuite(params.sim).tasks("train", config.tasks, params.rollouts.seed))
    order = list(range(len(tasks)))
    random.Random(config.seed).shuffle(order)
    slots = group_slots(params.rollouts.tree_k, config.tree_depth)
    return [
        {
            "prompt": orchestrator_messages(params, tasks[index], pool.profiles, []),
            "task_index": index,
            "slot": slot,
        }
        for index in order
        for slot in range(slots)
    ]


def tree_trainer(**kwargs: Any) -> Any:
    """A GRPOTrainer whose loss uses the tree's advantages (`tree_advantage` of each row)."""
    import torch
    from trl import GRPOTrainer

    class TreeGRPOTrainer(GRPOTrainer):
        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            output = super()._generate_and_score_completions(inputs)
            given = output["advantages"]
            output["advantages"] = torch.tensor(
                [row["tree_advantage"] for row in inputs], dtype=given.dtype, device=given.device
            )
            return output

    return TreeGRPOTrainer(**kwargs)


def tree_figures(rollout: TreeRollout) -> dict[str, float]:
    """Per leaf, over every step: tokens the trees generated and tokens independent rollouts
    of the same leaves would have (each its whole path)."""
    samples = sum(s["samples"] for s in rollout.steps)
    informative = sum(s["informative"] for s in rollout.steps)
    leaves = sum(s["leaves"] for s in rollout.steps)
    tokens = sum(s["tokens"] for s in rollout.steps)
    path = sum(s["path_tokens"] for s in rollout.steps)
    return {
        "leaves": leaves,
        "samples": samples,
        "informative_samples": informative,
        "leaf_return_sum": sum(s["leaf_return"] for s in rollout.steps),
        "tokens_per_leaf_tree": tokens / leaves if leaves else 0.0,
        "tokens_per_leaf_paths": path / leaves if leaves else 0.0,
        "token_saving_vs_paths": 1 - tokens / path if path else 0.0,
        "mean_leaf_return": (
            sum(s["leaf_return"] for s in rollout.steps) / leaves if leaves else 0.0
        ),
    }


def _key(messages: list[dict[str, str]]) -> str:
    return "\x1f".join(f"{m['role']}\x1e{m['content']}" for m in messages)


def train_tree_grpo(
    params: Params, out: Path, report_dir: str | Path | None = None
) -> dict[str, Any]:
    """Tree-GRPO from grpo.base_model: TRL's GRPOTrainer, on-policy trees as its rollouts;
    writes the checkpoint, its card, and the reward curve with the trees' token figures."""
    import warnings

    from datasets import Dataset
    from trl import GRPOConfig

    config = params.grpo
    k = params.rollouts.tree_k
    if k < 2:
        raise ConfigError("Tree-GRPO compares siblings: set rollouts.tree_k to 2 or more")
    rows = on_policy_rows(params)
    contract = params.orchestrator.contract()
    model, tokenizer, trainable, peft_config = grpo_trainable_copy(config, contract)
    rollout = TreeRollout(params, rows)
    staging = staging_dir(out)
    args = GRPOConfig(
        **trainer_args(staging, config.seed),
        max_steps=config.max_steps,
        learning_rate=config.learning_rate,
        beta=config.beta,
        num_generations=k,
        per_device_train_batch_size=k * rollout.slots * config.prompts_per_step,
        max_completion_length=config.max_completion_length,
        temperature=config.temperature,
        scale_rewards=config.scale_rewards,
        shuffle_dataset=False,  # a tree's rows stay together; on_policy_rows drew the order
        generation_kwargs={"use_cache": True},
    )
    with warnings.catch_warnings():  # rollout_func is experimental in TRL 1.x: we pin TRL
        warnings.filterwarnings("ignore", message="You are using 'rollout_func'")
        trainer = tree_trainer(
            model=model,
            reward_funcs=[TreeValue()],
            args=args,
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            peft_config=peft_config,
            rollout_func=rollout,
        )
    started, cpu_started = time.perf_counter(), time.process_time()
    trainer.train()
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    curve = [
        {"step": e["step"], "loss": e.get("loss", 0.0), "reward": e["reward"]}
        for e in trainer.state.log_history
        if "reward" in e
    ]
    for point, step in zip(curve, rollout.steps, strict=False):
        point["mean_leaf_return"] = step["leaf_return"] / step["leaves"] if step["leaves"] else 0.0
    figures = tree_figures(rollout)
    metrics = {
        "base_model": config.base_model,
        "rollout": "on_policy",
        "tasks": len(rows) // rollout.slots,
        "steps": config.max_steps,
        "group_size": k,
        "tree_depth": config.tree_depth,
        "advantage_scope": config.advantage_scope,
        "trainable_parameters": trainable,
        "train_seconds": seconds,
        "cpu_seconds": cpu_seconds,
        **figures,
        **{
            f"{figure}_per_cpu_hour": figures[figure] * 3600 / cpu_seconds if cpu_seconds else 0.0
            for figure in ("leaves", "samples", "informative_samples", "leaf_return_sum")
        },
        "first_reward": curve[0]["mean_leaf_return"] if curve else None,
        "last_reward": curve[-1]["mean_leaf_return"] if curve else None,
    }
    whole_tree = " and the whole tree" if config.advantage_scope == "tree" else ""
    card = (
        "---\nlibrary_name: transformers\ntags: [easy, orchestrator, grpo, tree-grpo, trl]\n---"
        f"\n\n# easy orchestrator, Tree-GRPO from {config.base_model}\n\nTRL GRPOTrainer; each "
        f"step grows {config.prompts_per_step} on-policy tree(s) with the model being trained "
        f"(K={k} samples at each decision to depth {config.tree_depth}, continuation "
        f"{config.continuation}); a sample's reward is the mean return of its subtree, its "
        f"advantage against its siblings{whole_tree}."
        "\n\nMean leaf return per step: "
        + ", ".join(f"{c['mean_leaf_return']:.3f}" for c in curve)
        + "\n\nParams:\n"
        + "\n".join(f"- {key}: {value}" for key, value in config.model_dump().items())
        + "\n"
    )
    publish_checkpoint(trainer, tokenizer, config.lora, staging, out, card, contract)
    report = Path(report_dir) if report_dir is not None else out
    write_report(
        report,
        metrics,
        curve,
        "mean_leaf_return",
        "mean leaf return of the step's trees",
        "Tree-GRPO, on-policy trees",
    )
    return metrics
