"""`easy bench tree-grpo`: what on-policy trees buy (docs/BENCHMARKS.md, "Tree-GRPO").

1. Tokens per leaf: the model's own trees (K samples at each decision to depth D) against
   independent episodes of the same model with as many leaves, on the same training tasks.
2. Per CPU-hour: Tree-GRPO (depth D) against root-only GRPO (depth 1: one sibling group per task,
   each sample's episode played on by the model) from the same base model for the same number of
   steps: leaves, trained samples, samples with a non-zero advantage, and summed leaf return per
   CPU-hour of the whole training process, with each run's mean leaf return.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Any

from easy_core.core.params import Params
from easy_core.core.stats import ratio_of_sums
from easy_core.learning.tree_grpo import TreeRollout, on_policy_rows, train_tree_grpo


def tree_token_figures(params: Params, tasks: int) -> dict[str, Any]:
    """Generated orchestrator tokens per leaf, trees against independent episodes."""
    import torch
    from tqdm import tqdm

    from easy_core.executors.hf_models import load_causal_lm

    config = params.grpo
    small = params.model_copy(update={"grpo": config.model_copy(update={"tasks": tasks})})
    rollout = TreeRollout(small, on_policy_rows(small))
    model, tokenizer = load_causal_lm(config.base_model, config.threads)
    torch.manual_seed(config.seed)
    returns: list[float] = []
    per_task: list[dict[str, int]] = []  # the spread behind the total, task by task
    for index in tqdm(range(len(rollout.tasks)), desc="trees and independent episodes"):
        tree = rollout.grow(model, tokenizer, [index])[0]
        task = {
            "leaves": len(tree.leaves),
            "tree_tokens": tree.tokens(),
            "independent_tokens": rollout.independent_tokens(
                model, tokenizer, index, len(tree.leaves)
            ),
        }
        per_task.append(task)
        returns += [n.leaf.reward.total for n in tree.leaves if n.leaf is not None]
        # a task takes minutes on CPU: the running figure lets a stopped run still count
        share = sum(t["tree_tokens"] for t in per_task) / max(
            sum(t["independent_tokens"] for t in per_task), 1
        )
        tqdm.write(
            f"task {index + 1}: {task['leaves']} leaves, tree {task['tree_tokens']} tokens, "
            f"independent {task['independent_tokens']}; so far "
            f"{sum(t['leaves'] for t in per_task)} leaves, token saving {1 - share:.1%}"
        )
    tree_tokens = [t["tree_tokens"] for t in per_task]
    independent = [t["independent_tokens"] for t in per_task]
    leaves = sum(t["leaves"] for t in per_task)
    share, (low, high) = ratio_of_sums(tree_tokens, independent)
    return {
        "tasks": float(len(rollout.tasks)),
        "k": float(rollout.k),
        "depth": float(rollout.depth),
        "leaves": float(leaves),
        "tokens_per_leaf_tree": sum(tree_tokens) / leaves,
        "tokens_per_leaf_independent": sum(independent) / leaves,
        "token_saving": 1 - share,
        # tasks resampled: how far the saving could move on other tasks of the split
        "token_saving_interval": [1 - high, 1 - low],
        "mean_leaf_return": statistics.fmean(returns),
        "per_task": per_task,
    }


def cpu_hour_figures(params: Params, steps: int) -> dict[str, dict[str, Any]]:
    """Tree-GRPO at params' depth and root-only GRPO, each trained `steps` steps."""
    runs = {}
    for name, depth in (("tree", params.grpo.tree_depth), ("root_only", 1)):
        grpo = params.grpo.model_copy(update={"tree_depth": depth, "max_steps": steps})
        with tempfile.TemporaryDirectory() as folder:
            runs[name] = train_tree_grpo(
                params.model_copy(update={"grpo": grpo}), Path(folder) / "model"
            )
    return runs


def markdown(tokens: dict[str, Any], runs: dict[str, dict[str, Any]]) -> str:
    lines = [
        f"Tokens per leaf ({tokens['tasks']:.0f} tasks, K={tokens['k']:.0f}, "
        f"D={tokens['depth']:.0f}, {tokens['leaves']:.0f} leaves): trees "
        f"{tokens['tokens_per_leaf_tree']:.1f}, independent "
        f"{tokens['tokens_per_leaf_independent']:.1f}, saving {tokens['token_saving']:.1%} "
        f"(95% interval over tasks {tokens['token_saving_interval'][0]:.1%}-"
        f"{tokens['token_saving_interval'][1]:.1%})",
        "",
        "| run | depth | steps | CPU s | leaves/CPU-h | samples/CPU-h | informative/CPU-h "
        "| leaf return/CPU-h | mean leaf return |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in runs.items():
        lines.append(
            f"| {name} | {m['tree_depth']} | {m['steps']} | {m['cpu_seconds']:.0f} "
            f"| {m['leaves_per_cpu_hour']:.1f} | {m['samples_per_cpu_hour']:.1f} "
            f"| {m['informative_samples_per_cpu_hour']:.1f} "
            f"| {m['leaf_return_sum_per_cpu_hour']:.2f} | {m['mean_leaf_return']:.3f} |"
        )
    return "\n".join(lines)
