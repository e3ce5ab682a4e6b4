"""Is there anything for GRPO to learn from? Before an hour of training: sample the groups a
GRPO step would sample (the warm start, the root prompts of the tree rollouts, the group size
and temperature of params.yaml, the same plan schemas), score them with the same reward hook,
and count the groups whose samples differ in correctness. Only those carry the signal the run
is for; in a group where every sample fails, the advantages are cost noise (and, scaled by
the group's tiny spread, full-size cost noise). `greedy`'s own first plan on the same prompts is
scored alongside, as what a good first plan is worth under this reward."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from easy_core.core.clock import DiscreteEventClock, run_synchronously
from easy_core.core.errors import ConfigError
from easy_core.core.params import Params
from easy_core.core.schemas import Trajectory
from easy_core.core.stats import mean
from easy_core.learning.grpo import SimReward, tree_prompts
from easy_core.learning.trees import TaskTree
from easy_core.plans.prompting import plan_text
from easy_core.policies import get_policy
from easy_core.policies.llm import chat_prompt_ids, generate_ids


def _worth(episodes: list[Trajectory]) -> tuple[float, float]:
    """A completion's mean episode reward and share of right answers (0, 0: not a plan)."""
    return mean([t.reward.total for t in episodes]), mean([float(t.correct) for t in episodes])


def group_signal(
    params: Params,
    model_dir: str | Path,
    n_prompts: int,
    trees: list[TaskTree] | None = None,
    on_group: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    from easy_core.executors.hf_models import load_causal_lm

    config = params.grpo
    k = params.rollouts.tree_k
    roots = [row for row in tree_prompts(params, trees) if not json.loads(row["prefix"])]
    if not roots:
        raise ConfigError("no root prompts in the tree rollouts; grow them with `dvc repro`")
    roots = roots[:n_prompts]
    reward = SimReward(params)
    model, tokenizer = load_causal_lm(str(model_dir), config.threads)
    rewards: list[float] = []
    successes: list[float] = []
    contrast = 0
    teacher_rewards: list[float] = []
    teacher_successes: list[float] = []
    for row in roots:
        index = row["task_index"]
        prompt = chat_prompt_ids(tokenizer, row["prompt"])
        schema = json.loads(row["schema"]) if config.structured else None
        samples = generate_ids(
            model,
            tokenizer,
            [prompt],
            [schema],
            config.max_completion_length,
            config.temperature,
            config.executor_temperature,
            copies=k,
        )
        group = []
        for ids in samples:
            worth, right = _worth(
                reward.play(tokenizer.decode(ids, skip_special_tokens=True), index, [])
            )
            rewards.append(worth)
            group.append(right)
        successes.extend(group)
        contrast += len(set(group)) > 1
        greedy = run_synchronously(
            reward.runner.run(
                reward.tasks[index], get_policy("greedy"), reward.seed, DiscreteEventClock()
            )
        )
        worth, right = _worth(reward.play(plan_text(greedy.milestones[0].plan), index, []))
        teacher_rewards.append(worth)
        teacher_successes.append(right)
        if on_group is not None:
            on_group(1)
    return {
        "model": str(model_dir),
        "prompts": len(roots),
        "group_size": k,
        "temperature": config.temperature,
        "executor_temperature": config.executor_temperature,
        "reward_worlds": config.reward_worlds,
        "continuation": config.continuation,
        "mean_reward": mean(rewards),
        "sample_success": mean(successes),
        "groups_with_contrast": contrast / len(roots),
        "greedy_first_plan_mean_reward": mean(teacher_rewards),
        "greedy_first_plan_success": mean(teacher_successes),
    }
