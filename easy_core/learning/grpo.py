"""GRPO on tree rollouts with TRL's GRPOTrainer (no hand-written policy gradient).

Prompts are the decision states of tree rollouts (`tree_rollouts`): the root of each task's
tree and its inner nodes, each rendered as the orchestrator sees it (cards, task, the milestone
history of that branch). GRPO samples `num_generations` answers per prompt: the sibling group of
that node, under the node's plan schema (`StructuredRollout`, TRL's rollout hook) as the `easy`
policy decodes at inference, so a group differs in its choices rather than in broken JSON. The
reward hook scores each answer in the simulator: an answer that is not a valid plan gets 0; a
valid one is played from the node's state (the branch's earlier plans replayed,
deterministically, then this answer, then the `grpo.continuation` policy to the end) and gets
the episode's reward, for a root averaged over `grpo.reward_worlds` outcome seeds.

Two options aim the training at the executor choice a warm start collapses (docs/BENCHMARKS.md,
"GRPO against SFT"). `grpo.guide` is off-policy guidance as LUFFY does it: the last sample of
each root's group is the best first plan of the named policies (scored by the same hook), so a
group always holds one plan that reaches what the policy's own samples do not, and the group's
advantages weigh it. `grpo.renamed_pools` shows each root also under renamed executors in
shuffled card order: a policy that learnt the training pool's names, not the cards, gains
nothing there.

Output like the SFT stage: checkpoint (`save_pretrained`, tokenizer, model card with the params
and the data), the reward curve per step.

One concept in one module: GRPO of the orchestrator with TRL's GRPOTrainer, its prompts from
trees, its reward hook and its sampling; they share one configuration and change together.
"""

from __future__ import annotations

import json
import random
import time
import warnings
from pathlib import Path
from typing import Any

from easy_core.core.clock import DiscreteEventClock, run_synchronously
from easy_core.core.errors import ConfigError, PlanError
from easy_core.core.params import Params
from easy_core.core.schemas import ExecutorProfile, Plan, PoolConfig, Trajectory
from easy_core.core.stats import mean
from easy_core.executors.pool import ExecutorPool, load_pool, load_pool_context
from easy_core.learning.checkpoints import (
    grpo_trainable_copy,
    privileged_note,
    publish_checkpoint,
    staging_dir,
    trainer_args,
    write_report,
)
from easy_core.learning.tree_grpo import train_tree_grpo
from easy_core.learning.trees import TaskTree, TreeNode, grow_tree
from easy_core.plans.prompting import orchestrator_messages, plan_text
from easy_core.plans.structured import executor_token_mask, schema_accepts, turn_schema
from easy_core.plans.validation import parse_plan, validate_plan
from easy_core.policies import get_policy
from easy_core.policies.levels import plan_in_levels, resolve_levels
from easy_core.policies.llm import chat_prompt_ids, executor_slot, generate_ids
from easy_core.runtime.episode import EpisodeRunner
from easy_core.runtime.policy import EpisodeState, OutcomeOracle
from easy_core.world.random_pools import drawn_names, random_pool
from easy_core.world.suites.sim import SimSuite


class ScriptedPolicy:
    """Plays given turns in order, then hands over to another policy (a privileged one, the
    oracle, only where params allow privileged guidance: the validators refuse it otherwise)."""

    def __init__(self, turns: list[Plan | str], then: str = "greedy"):
        self.turns = turns
        self.then = get_policy(then)
        self.name = "scripted"
        self.privileged = getattr(self.then, "privileged", False) is True

    def _scripted(self, state: EpisodeState) -> Plan | str | None:
        played = state.scratch.get("scripted_turns", 0)
        if played < len(self.turns):
            state.scratch["scripted_turns"] = played + 1
            return self.turns[played]
        return None

    async def act(self, state: EpisodeState) -> Plan | str:
        turn = self._scripted(state)
        return turn if turn is not None else await self.then.act(state)

    async def act_with_outcomes(
        self, state: EpisodeState, outcomes: OutcomeOracle | None
    ) -> Plan | str:
        turn = self._scripted(state)
        if turn is not None:
            return turn
        return await self.then.act_with_outcomes(state, outcomes)  # type: ignore[attr-defined]


def renamed_profiles(
    profiles: list[ExecutorProfile], rng: random.Random, fresh: bool = False
) -> tuple[list[ExecutorProfile], dict[str, str]]:
    """The pool's profiles under other names (`fresh_names` when `fresh`), in shuffled order,
    and the map from each shown name to the executor it stands for."""
    shown = dict(zip(drawn_names(rng, len(profiles), fresh), profiles, strict=True))
    cards = [profile.model_copy(update={"name": name}) for name, profile in shown.items()]
    rng.shuffle(cards)
    return cards, {name: profile.name for name, profile in shown.items()}


def rename_executors(text: str, names: dict[str, str], executor_last: bool = False) -> str:
    """The plan in `text` with its steps' executors renamed by `names`, written in the contract
    `executor_last` names (text that is not a plan comes back as it is: it scores 0 either
    way)."""
    if not names:
        return text
    try:
        plan = parse_plan(text)
    except PlanError:
        return text
    steps = [step.model_copy(update={"executor": names.get(step.executor, step.executor)})
             for step in plan.steps]  # fmt: skip
    return plan_text(plan.model_copy(update={"steps": steps}), executor_last)


def read_trees(path: str | Path) -> list[TaskTree]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"tree rollouts {path} not found; grow them with `dvc repro rollouts`")
    return [TaskTree.model_validate_json(line) for line in path.read_text().splitlines()]


def tree_prompts(params: Params, trees: list[TaskTree] | None = None) -> list[dict[str, Any]]:
    """GRPO prompts from the decision states (root and inner nodes) of tree rollouts: stored
    trees when given (the rollouts stage's), else trees grown here with params.rollouts."""
    config = params.grpo
    executor_last = params.orchestrator.executor_last
    pool = load_pool(params.rollouts.pool, params)
    tasks = list(SimSuite(params.sim).tasks("train", config.tasks, params.rollouts.seed))
    if trees is None:
        runner = EpisodeRunner(pool, params, SimSuite.check)
        policy = get_policy(params.rollouts.tree_policy)
        trees = [
            grow_tree(
                runner,
                policy,
                task,
                params.rollouts.seed,
                params.rollouts.tree_k,
                params.rollouts.tree_depth,
            )
            for task in tasks
        ]
    by_id = {task.id: i for i, task in enumerate(tasks)}
    rows = []
    for tree in trees:
        index = by_id.get(tree.task_id)
        if index is None:
            continue  # beyond grpo.tasks
        below: dict[int, list[TreeNode]] = {}
        for node in tree.nodes:
            if node.parent is not None:
                below.setdefault(node.parent, []).append(node)
        for node in tree.nodes:
            if node.leaf is not None or node.id not in below or node.depth >= config.tree_depth:
                continue
            leaf = node
            while leaf.leaf is None:
                leaf = below[leaf.id][0]
            prefix = leaf.leaf.milestones[: node.depth]
            if len(prefix) < node.depth:
                continue  # a repair turn on the way: no plan to replay
            # a prefix's plans and results name the pool's executors: roots only are shown
            # under other pools
            fresh = config.fresh_names
            if fresh and prefix:
                continue  # the prefix names the training pool's executors, which fresh hides
            if fresh:
                rng = random.Random(f"{tree.task_id}/fresh")
                views = [(*renamed_profiles(pool.profiles, rng, fresh=True), "")]
            else:
                views = [(pool.profiles, {}, "")]
            for variant in range(config.renamed_pools if not prefix else 0):
                rng = random.Random(f"{tree.task_id}/{variant}")
                views.append((*renamed_profiles(pool.profiles, rng, fresh), ""))
            for variant in range(config.random_pools if not prefix else 0):
                seed = random.Random(f"{tree.task_id}/drawn/{variant}")
                drawn = random_pool(seed, fresh=fresh)
                views.append((drawn.executors, {}, drawn.model_dump_json()))
            for profiles, names, drawn_pool in views:
                schema = turn_schema(
                    tasks[index],
                    executor_slot(params.orchestrator, [p.name for p in profiles]),
                    prefix,
                    params.limits.max_steps_per_plan,
                    executor_last,
                )
                rows.append(
                    {
                        "prompt": orchestrator_messages(params, tasks[index], profiles, prefix),
                        "task_index": index,
                        "prefix": json.dumps([plan_text(m.plan) for m in prefix]),
                        "schema": json.dumps(schema),
                        "names": json.dumps(names),
                        "pool": drawn_pool,  # "" for the training pool
                    }
                )
    return rows


def add_guides(
    params: Params, rows: list[dict[str, Any]], reward: SimReward, tokenizer: Any
) -> list[dict[str, Any]]:
    """Writes each root row's guide (`grpo.guide`): of the guide policies' first plans from
    the root, the one the reward hook scores highest, under the row's executor names. Returns
    the rows to train on: a root whose guide is longer than grpo.max_completion_length is left
    out, since TRL would cut the guide and the policy's own plans of that length as well (a
    group that scores 0 throughout teaches nothing and costs a step)."""
    policies = params.grpo.guide
    best: dict[tuple[int, str], str] = {}
    kept = []
    for row in rows:
        row["guide"] = ""
        if not policies or json.loads(row["prefix"]):
            kept.append(row)
            continue
        index, pool = row["task_index"], row["pool"]
        if (index, pool) not in best:
            firsts = [reward.first_plan(policy, index, pool) for policy in policies]
            best[index, pool] = max(
                firsts, key=lambda text: reward.score(text, index, [], pool), default=""
            )
        forward = {original: shown for shown, original in json.loads(row["names"]).items()}
        text = rename_executors(best[index, pool], forward, params.orchestrator.executor_last)
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) + 1 > params.grpo.max_completion_length:
            continue
        if text and not schema_accepts(tokenizer, json.loads(row["schema"]), ids):
            raise ConfigError(
                f"the guide plan for task {index} does not fit its prompt's plan schema: "
                f"{text[:200]}; guide with policies that plan every subtask as the task "
                "grammar does (strongest, greedy)"
            )
        row["guide"] = text
        kept.append(row)
    return kept


class StructuredRollout:
    """TRL rollout hook (`rollout_func`): samples one completion per prompt row (the trainer
    repeats each prompt `num_generations` times) with transformers, each row masked by its
    prompt's plan schema. The loss then sees the tokens the policy sampled; the mask only keeps
    the group's answers valid plans. With `grpo.executor_temperature` the executor names are
    sampled hotter than the rest: the loss still scores them under the policy at
    `grpo.temperature` (a behaviour policy aimed at the executor choice, as an exploration
    bonus would be; TRL corrects no ratio for it with one iteration per batch). With
    `grpo.loss_tokens: executors` the loss trains those names only (TRL's `env_mask`)."""

    def __init__(
        self,
        rows: list[dict[str, Any]],
        max_new_tokens: int,
        temperature: float,
        executor_temperature: float | None = None,
        executors_only: bool = False,
    ):
        self.schemas = {_prompt_key(row["prompt"]): json.loads(row["schema"]) for row in rows}
        self.guides = {_prompt_key(row["prompt"]): row.get("guide", "") for row in rows}
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.executor_temperature = executor_temperature
        self.executors_only = executors_only

    def __call__(self, prompts: list, trainer: Any) -> dict[str, Any]:
        tokenizer = trainer.processing_class
        keys = [_prompt_key(p) for p in prompts]
        prompt_ids = [chat_prompt_ids(tokenizer, p) for p in prompts]
        # TRL lists each prompt num_generations times in a row: the last of each run is the
        # guide's place when the prompt has one
        guided = [
            bool(self.guides[key]) and (i + 1 == len(keys) or keys[i + 1] != key)
            for i, key in enumerate(keys)
        ]
        sampled = iter(
            generate_ids(
                trainer.model,
                tokenizer,
                [ids for ids, guide in zip(prompt_ids, guided, strict=True) if not guide],
                [self.schemas[key] for key, guide in zip(keys, guided, strict=True) if not guide],
                self.max_new_tokens,
                self.temperature,
                self.executor_temperature,
            )
        )
        completions = [
            tokenizer.encode(self.guides[key], add_special_tokens=False) + [tokenizer.eos_token_id]
            if guide
            else next(sampled)
            for key, guide in zip(keys, guided, strict=True)
        ]
        output = {
            "prompt_ids": prompt_ids,
            "completion_ids": completions,
            "logprobs": None,
            "guided": guided,
        }
        if self.executors_only:  # TRL's env_mask: the tokens the loss trains
            output["env_mask"] = [executor_token_mask(tokenizer, ids) for ids in completions]
        return output


def _prompt_key(messages: list[dict[str, str]]) -> str:
    return json.dumps([[m["role"], m["content"]] for m in messages])


class SimReward:
    """TRL reward hook: the episode reward of each completion, played in the simulator."""

    __name__ = "sim_reward"

    def __init__(self, params: Params):
        get_policy(params.grpo.continuation)  # a bad name fails here, not at the first reward
        self.params = params
        self.pool = load_pool(params.rollouts.pool, params)
        self.runner = EpisodeRunner(self.pool, params, SimSuite.check)
        self.drawn_runners: dict[str, EpisodeRunner] = {}
        # The prompts' tasks and branch states come from the tree rollouts: same tasks, same
        # episode seed, so a replayed prefix reproduces the state the prompt describes.
        self.seed = params.rollouts.seed
        self.tasks = list(SimSuite(params.sim).tasks("train", params.grpo.tasks, self.seed))
        self.log: list[dict[str, float | None]] = []  # per call: mean reward of own, guide samples

    def runner_for(self, pool: str) -> EpisodeRunner:
        """The runner of the training pool (""), or of a drawn pool given as its JSON."""
        if not pool:
            return self.runner
        if pool not in self.drawn_runners:
            drawn = ExecutorPool.from_config(
                PoolConfig.model_validate_json(pool), load_pool_context(self.params)
            )
            self.drawn_runners[pool] = EpisodeRunner(drawn, self.params, SimSuite.check)
        return self.drawn_runners[pool]

    def play(
        self, text: str, task_index: int, prefix: list[str], pool: str = ""
    ) -> list[Trajectory]:
        """The episodes a completion is scored on: none when it is not a valid plan."""
        task = self.tasks[task_index]
        runner = self.runner_for(pool)
        try:
            plan = parse_plan(text)
            if self.params.orchestrator.executor_levels:  # levels name executors on this pool
                slope = self.params.capability.difficulty_slope
                plan = resolve_levels(plan, task, runner.pool.profiles, slope)
                text = plan_text(plan, self.params.orchestrator.executor_last)
            validate_plan(plan, set(runner.pool.executors), subtask_ids=task.subtask_index)
        except PlanError:
            return []
        # An inner node's prompt shows its branch's results, which exist in the tree's world
        # only; a root's plan can be scored in several.
        worlds = 1 if prefix else self.params.grpo.reward_worlds
        return [
            run_synchronously(
                runner.run(
                    task,
                    ScriptedPolicy([*prefix, text], then=self.params.grpo.continuation),
                    self.seed + world,
                    DiscreteEventClock(),
                )
            )
            for world in range(worlds)
        ]

    def first_plan(self, policy: str, task_index: int, pool: str = "") -> str:
        """The first plan `policy` makes for a root's task ("" when it answers at once)."""
        episode = run_synchronously(
            self.runner_for(pool).run(
                self.tasks[task_index], get_policy(policy), self.seed, DiscreteEventClock()
            )
        )
        if not episode.milestones:
            return ""
        plan = episode.milestones[0].plan
        if self.params.orchestrator.executor_levels:  # the guide in the model's contract
            profiles = self.runner_for(pool).pool.profiles
            slope, label = self.params.capability.difficulty_slope, self.params.sft_data.level_label
            plan, _ = plan_in_levels(plan, self.tasks[task_index], profiles, slope, label)
        return plan_text(plan, self.params.orchestrator.executor_last)

    def score(self, text: str, task_index: int, prefix: list[str], pool: str = "") -> float:
        return mean([t.reward.total for t in self.play(text, task_index, prefix, pool)])

    def __call__(
        self,
        prompts: list,
        completions: list,
        task_index: list[int],
        prefix: list[str],
        names: list[str] | None = None,
        pool: list[str] | None = None,
        guided: list[bool] | None = None,
        **_: Any,
    ) -> list[float]:
        rewards = []
        names = names or ["{}"] * len(completions)
        pool = pool or [""] * len(completions)
        for completion, index, steps, shown, drawn in zip(
            completions, task_index, prefix, names, pool, strict=True
        ):
            text = completion[0]["content"] if isinstance(completion, list) else completion
            text = rename_executors(text, json.loads(shown))
            rewards.append(self.score(text, index, json.loads(steps), drawn))
        guided = guided or [False] * len(rewards)
        own = [r for r, g in zip(rewards, guided, strict=True) if not g]
        guides = [r for r, g in zip(rewards, guided, strict=True) if g]
        self.log.append({"policy_reward": mean(own) if own else None,
                         "guide_reward": mean(guides) if guides else None})  # fmt: skip
        return rewards


def train_grpo(
    params: Params,
    out_dir: str | Path | None = None,
    report_dir: str | Path | None = None,
    trees: list[TaskTree] | None = None,
) -> dict[str, Any]:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    config = params.grpo
    out = Path(out_dir or config.out)
    if config.rollout == "on_policy":
        if params.orchestrator.executor_levels:
            raise ConfigError(
                "Tree-GRPO (grpo.rollout: on_policy) does not train the executor-levels "
                "contract yet: set grpo.rollout: stored, or orchestrator.executor_levels=false"
            )
        return train_tree_grpo(params, out, report_dir)
    rows = tree_prompts(params, trees)
    if not rows:
        raise ConfigError("no decision states in the tree rollouts to train on")
    contract = params.orchestrator.contract()
    model, tokenizer, trainable, peft_config = grpo_trainable_copy(config, contract)
    reward = SimReward(params)
    all_rows = len(rows)
    rows = add_guides(params, rows, reward, tokenizer)
    if not rows:
        raise ConfigError(
            "every guide plan is longer than grpo.max_completion_length "
            f"({config.max_completion_length} tokens); raise it"
        )
    staging = staging_dir(out)
    args = GRPOConfig(
        **trainer_args(staging, config.seed),
        max_steps=config.max_steps,
        learning_rate=config.learning_rate,
        beta=config.beta,
        num_generations=params.rollouts.tree_k,
        per_device_train_batch_size=params.rollouts.tree_k * config.prompts_per_step,
        max_completion_length=config.max_completion_length,
        temperature=config.temperature,
        scale_rewards=config.scale_rewards,
        use_vllm=config.use_vllm,
        generation_kwargs={"use_cache": True},
    )
    with warnings.catch_warnings():  # rollout_func is experimental in TRL 1.x: we pin TRL
        warnings.filterwarnings("ignore", message="You are using 'rollout_func'")
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[reward],
            args=args,
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            peft_config=peft_config,
            rollout_func=(
                StructuredRollout(
                    rows,
                    config.max_completion_length,
                    config.temperature,
                    config.executor_temperature,
                    config.loss_tokens == "executors",
                )
                if config.structured and not config.use_vllm
                else None
            ),
        )
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    curve = [
        {"step": e["step"], "loss": e.get("loss", 0.0), "reward": e["reward"]}
        for e in trainer.state.log_history
        if "reward" in e
    ]
    if params.grpo.guide:  # the group mean includes the guide: the policy's own samples apart
        for point, call in zip(curve, reward.log, strict=False):
            point.update(call)
    metrics = {
        "base_model": config.base_model,
        "prompts": len(rows),
        "steps": config.max_steps,
        "group_size": params.rollouts.tree_k,
        "guided_prompts": sum(bool(row["guide"]) for row in rows),
        "too_long_prompts": all_rows - len(rows),
        "trainable_parameters": trainable,
        "train_seconds": seconds,
        "first_reward": curve[0]["reward"] if curve else None,
        "last_reward": curve[-1]["reward"] if curve else None,
    }
    card = (
        "---\nlibrary_name: transformers\ntags: [easy, orchestrator, grpo, trl]\n---\n\n"
        f"# easy orchestrator, GRPO from {config.base_model}\n\nTRL GRPOTrainer on "
        f"{len(rows)} decision states of tree rollouts (K={params.rollouts.tree_k}, prompts "
        f"to depth {config.tree_depth}); reward: the simulator's episode reward.\n\n"
        + privileged_note(config.guide + [config.continuation])
        + "Per step: "
        + ", ".join(f"{c['reward']:.3f}" for c in curve)
        + "\n\nParams:\n"
        + "\n".join(f"- {k}: {v}" for k, v in config.model_dump().items())
        + "\n"
    )
    publish_checkpoint(trainer, tokenizer, config.lora, staging, out, card, contract)
    report = Path(report_dir) if report_dir is not None else out
    if params.grpo.guide:
        plotted, label = "policy_reward", "mean reward of the policy's samples"
    else:
        plotted, label = "reward", "mean reward of the group"
    write_report(report, metrics, curve, plotted, label, "GRPO on tree rollouts")
    return metrics
