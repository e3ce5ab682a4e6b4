"""Does an orchestrator checkpoint copy executor names from the cards? At the first step's
executor slot (the teacher's plan up to `"executor":"`, in the checkpoint's output contract),
the share of its unconstrained next-token probability that falls on tokens with which one of
the pool's names can begin. A checkpoint that reads the cards puts nearly all of it there on
any pool; one that has learnt names by heart puts it on the names it was trained on, and on a
pool of other names the grammar then picks whichever allowed name happens to begin like them.
"""

from __future__ import annotations

from typing import Any

from easy_core.core.errors import ConfigError
from easy_core.core.params import Params
from easy_core.executors.hf_models import in_trained_contract, load_causal_lm
from easy_core.executors.pool import load_pool
from easy_core.plans.prompting import orchestrator_messages, plan_text
from easy_core.plans.structured import EXECUTOR_KEY
from easy_core.policies.batch import run_episodes
from easy_core.policies.llm import chat_prompt_ids
from easy_core.runtime.episode import EpisodeRunner
from easy_core.world.suites.sim import SimSuite

MARKER = "\u2063"  # stands for the executor's name until the text is cut before it


def name_reading(
    params: Params, model: str, pool_path: str, n: int, seed: int = 0, split: str = "validation"
) -> dict[str, Any]:
    """Per task and on average: the next-token mass on the pool's name beginnings, and the
    most likely tokens, at the executor slot of `greedy`'s first step."""
    import torch

    params = in_trained_contract(params, model)
    if params.orchestrator.executor_levels:
        raise ConfigError(
            f"{model} writes executor levels, not names: name reading measures checkpoints of "
            "the names contract"
        )
    executor_last = params.orchestrator.executor_last
    network, tokenizer = load_causal_lm(model, params.orchestrator.threads)
    pool = load_pool(pool_path, params)
    beginnings = name_beginnings(tokenizer, list(pool.executors))
    tasks = list(SimSuite(params.sim).tasks(split, n, seed))
    runner = EpisodeRunner(pool, params, SimSuite.check)
    rows = []
    for task, trajectory in zip(tasks, run_episodes(tasks, runner, "greedy", seed), strict=True):
        plan = trajectory.milestones[0].plan
        first = plan.steps[0].model_copy(update={"executor": MARKER})
        text = plan_text(plan.model_copy(update={"steps": [first]}), executor_last)
        prefix = text[: text.index(EXECUTOR_KEY + MARKER) + len(EXECUTOR_KEY)]
        messages = orchestrator_messages(params, task, pool.profiles, [])
        ids = chat_prompt_ids(tokenizer, messages)
        ids += tokenizer.encode(prefix, add_special_tokens=False)
        with torch.no_grad():
            probs = network(torch.tensor([ids])).logits[0, -1].float().softmax(-1)
        top = probs.topk(5)
        rows.append(
            {
                "task": task.id,
                "mass_on_pool_names": round(float(probs[beginnings].sum()), 4),
                "top_tokens": [
                    [tokenizer.decode([int(i)]), round(float(p), 3)]
                    for p, i in zip(top.values, top.indices, strict=True)
                ],
            }
        )
    mass = [row["mass_on_pool_names"] for row in rows]
    return {
        "model": model,
        "pool": pool.name,
        "executor_last": executor_last,
        "n": len(rows),
        "mean_mass_on_pool_names": round(sum(mass) / len(mass), 4),
        "tasks": rows,
    }


def name_beginnings(tokenizer: Any, names: list[str]) -> list[int]:
    """Token ids whose text is a non-empty beginning of one of `names` (what a grammar over
    the names lets through as a name's first token)."""
    ids = []
    for token_id in range(len(tokenizer)):
        piece = tokenizer.decode([token_id])
        if piece and any(name.startswith(piece) for name in names):
            ids.append(token_id)
    return ids
