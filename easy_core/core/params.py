"""Every knob of every stage (params.yaml). Defaults here are the embedded CPU default.

One module on purpose: the whole params.yaml schema, section by section, so a knob and its
validation are found in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from easy_core.core.config import load_yaml_model, validate_model


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LimitParams(_Section):
    max_steps_per_plan: int = Field(64, ge=1)


class RuntimeParams(_Section):
    max_milestones: int = Field(4, ge=1)
    step_timeout_s: float = Field(300.0, gt=0, description="the longest any call may take")
    step_timeout_factor: float = Field(
        3.0, ge=0, description="a call times out at this times its predicted latency (0: off)"
    )
    repair_turns: int = Field(1, ge=0)


class ResilienceParams(_Section):
    """What the engine does when an executor call fails (error, timeout, empty or malformed
    output): retry with backoff, then fall back to the next cheapest capable executor; a
    per-executor circuit breaker skips an executor that keeps failing."""

    attempts_per_executor: int = Field(3, ge=1)
    max_attempts: int = Field(5, ge=1, description="attempts per step over all executors")
    backoff_s: float = Field(0.2, ge=0)
    backoff_factor: float = Field(2.0, ge=1)
    fallback: bool = True
    breaker_failures: int = Field(5, ge=1, description="consecutive failures that open it")
    breaker_cooldown_s: float = Field(30.0, ge=0)


class CapabilityParams(_Section):
    difficulty_slope: float = Field(
        0.6, ge=0, description="logit change of success per difficulty level away from 3"
    )


class ExecutorParams(_Section):
    """Executors that run in this process (`hf` backend)."""

    hf_threads: int = Field(2, ge=1, description="torch threads for in-process models")
    hf_batch_size: int = Field(4, ge=1, description="steps generated together in one batch")
    hf_batch_window_s: float = Field(0.02, ge=0, description="wait for companions of a batch")


class SimParams(_Section):
    shared_hardness: float = Field(
        0.7, ge=0, le=1, description="correlation of outcomes across executors on one subtask"
    )
    missing_context_penalty: float = Field(
        0.3, ge=0, le=1, description="success multiplier per prerequisite result missing in context"
    )
    multi_cover_factor: float = Field(
        0.95, ge=0, le=1, description="success multiplier for each further subtask in one step"
    )
    latency_jitter: float = Field(0.1, ge=0, description="lognormal sigma of step latency")
    outcome_seed: int = Field(
        0,
        ge=0,
        description="salts the hidden draw of which steps succeed, and nothing else (tasks, "
        "latencies, self-check draws stay): other outcomes of the same episodes",
    )
    budget_usd_per_1m_tokens: float = Field(
        12.0, gt=0, description="task cost budget: its tokens times this price"
    )
    budget_time_factor: float = Field(
        3.0, gt=0, description="task time budget: this times its critical path at 40 tok/s"
    )
    time_scale: float = Field(
        1.0,
        gt=0,
        le=1,
        description="a sim step takes its modelled latency times this (1: as modelled); below 1 "
        "runs the simulated world faster, for load tests of a served pool in wall time; tasks' "
        "time budgets are not scaled",
    )


class RewardParams(_Section):
    w_correct: float = 1.0
    w_efficiency: float = 0.3
    w_completeness: float = 0.2
    cost_share: float = Field(
        0.5, ge=0, le=1, description="weight of cost against makespan inside efficiency"
    )


SIM_POOLS = ["configs/pools/sim-default.yaml", "configs/pools/sim-unseen.yaml"]
SIM_POOLS_DEFAULT = SIM_POOLS[0]


class PolicyParams(_Section):
    greedy_threshold: float = Field(
        0.95,
        ge=0,
        le=1,
        description="`greedy`: the cheapest executor whose expected success clears it "
        "(chosen on validation)",
    )
    program_threshold: float = Field(
        0.5,
        ge=0,
        le=1,
        description="the `program` policy's writer: the cheapest LLM whose code success clears it",
    )
    repair_shows_code: bool = Field(
        False,
        description="the `program` policy's code repair: the next writer sees the failed code "
        "beside what its examples printed (false: the report only, a fresh attempt)",
    )
    progress_model: str = Field(
        "models/progress.npz", description="the `progress` policy's predictor (`easy train-policy`)"
    )
    graph_model: str = Field(
        "models/graph.pt", description="the `graph` dispatcher's network (`easy train-policy`)"
    )
    # chosen on sim-default's validation split, each policy its own (docs/BENCHMARKS.md,
    # "An honest world"): the best weight differs between the two learned policies
    progress_cost_weight: float = Field(
        0.5,
        ge=0,
        description="`progress`: log task success traded for spending the whole cost budget "
        "(higher: cheaper plans)",
    )
    graph_cost_weight: float = Field(1.0, ge=0, description="the same for the `graph` dispatcher")
    time_weight: float = Field(
        0.5, ge=0, description="the same for time: log success per whole time budget"
    )


class PolicyTrainingParams(_Section):
    """Traces and offline training of the learned policies (`progress`, `graph`)."""

    pool: str = SIM_POOLS_DEFAULT
    trace_policies: list[str] = Field(default_factory=lambda: ["random", "greedy"])
    trace_greedy_threshold: float = Field(
        0.75,
        ge=0,
        le=1,
        description="the threshold of `greedy` while it writes traces: a lower one spreads its "
        "steps over more executors for the predictors to learn from (chosen on validation; "
        "the `greedy` baseline keeps policies.greedy_threshold)",
    )
    n_tasks: int = Field(2000, ge=10)
    seed: int = 0
    hidden: int = Field(32, ge=4)
    epochs: int = Field(60, ge=1)
    learning_rate: float = Field(0.01, gt=0)
    knn_k: int = Field(25, ge=1)
    knn_reference_rows: int = Field(5000, ge=100)
    holdout: float = Field(0.2, gt=0, lt=1, description="share of tasks that fit the gate")


class EvalParams(_Section):
    """Defaults of `easy eval` when its options are not given."""

    suite: str = "sim"
    split: Literal["train", "validation", "test"] = "test"
    n: int = Field(500, ge=1)
    seed: int = 0
    shard_size: int = Field(250, ge=1, description="episodes per resumable shard of `--out`")


BASELINE_POLICIES = ["strongest", "cheapest", "random", "greedy", "oracle"]


class PipelineParams(_Section):
    """How the Prefect flows run their tasks."""

    task_retries: int = Field(2, ge=0)
    task_retry_delay_s: list[float] = Field(
        default_factory=lambda: [1.0, 5.0, 20.0], description="backoff between task retries"
    )
    task_timeout_s: float = Field(1800.0, gt=0)
    max_workers: int = Field(64, ge=1, description="threads running concurrent Prefect tasks")
    task_runner: Literal["threads", "dask"] = Field(
        "threads",
        description="where the flows' tasks run: threads of the flow's process, or a Dask "
        "cluster through prefect-dask (`dask_address`, else EASY_DASK_ADDRESS, else a local "
        "cluster of worker processes)",
    )
    dask_address: str | None = Field(
        None, description="the Dask scheduler, e.g. tcp://10.0.0.5:8786"
    )
    call_overhead_s: float = Field(
        30.0,
        ge=0,
        description="the Prefect engine: what a step's task run may add to its call (the task "
        "run's orchestration, the trip to a Dask worker, a cold worker importing easy), allowed "
        "on top of the profile-based timeout in the flow; the call itself is bounded by that "
        "timeout where it runs, so this only ends calls whose worker was lost",
    )
    result_storage: str | None = Field(
        None,
        description="where Prefect persists task results: a local folder or an fsspec URL such "
        "as s3://bucket/prefix (credentials and endpoint from the environment); None: Prefect's "
        "default (~/.prefect/storage)",
    )


class ProfileParams(_Section):
    pools: list[str] = Field(default_factory=lambda: list(SIM_POOLS))
    suites: list[str] = Field(default_factory=lambda: ["sim"])
    n_tasks: int = Field(300, ge=1)
    seed: int = 0
    out_dir: str = Field(
        "results/profiles", description="where the profile stage writes POOL.yaml per pool"
    )
    apply: bool = Field(
        True,
        description="a pool without its own `profile:` takes its cards (capability with the "
        "sample counts measured, latency) from out_dir/<pool file stem>.yaml once the profile "
        "stage wrote it; a simulated executor's world keeps the pool file's own values "
        "(the truth the measurement estimates); false: the pool files' priors",
    )


class RealSuiteData(_Section):
    """Teacher turns on a real suite's training split."""

    suite: str = "research"
    # gpu-vllm: models that can synthesise an answer (the CPU pool's 135M models measure 0, so
    # its replay yields no successful trajectory to learn from)
    pool: str = "configs/pools/gpu-vllm.yaml"
    n_tasks: int = Field(56, ge=1)
    executors: Literal["replay", "real"] = Field(
        "replay",
        description="replay: the pool's measured profile replayed by sim executors (fast, no "
        "model or server); real: the pool's executors themselves (servers must be up)",
    )


# Policies that read outcomes; one is a teacher or guide only behind `allow_privileged`.
PRIVILEGED_POLICIES = frozenset({"oracle"})


def _refuse_privileged(names: Sequence[str], allowed: bool, section: str) -> None:
    used = sorted(set(names) & PRIVILEGED_POLICIES)
    if used and not allowed:
        raise ValueError(
            f"{', '.join(used)} reads outcomes no deployed system has: set "
            f"{section}.allow_privileged: true to train with it (the model card says so), "
            "or choose another policy"
        )


class SftDataParams(_Section):
    teacher: str = "greedy"
    allow_privileged: bool = Field(
        False, description="let a privileged policy (the oracle) be the teacher"
    )
    pool: str = SIM_POOLS[0]
    n_tasks: int = Field(400, ge=1)
    random_pools: int = Field(
        0, ge=0, description="pools drawn at random (easy_core.random_pools) to teach card reading"
    )
    random_pool_tasks: int = Field(10, ge=1, description="training tasks per drawn pool")
    fresh_names: bool = Field(
        False,
        description="show each sim example's pool under names drawn afresh (random syllables, "
        "cards shuffled), so a model can only copy an executor's name from the cards, not "
        "recall it",
    )
    seed: int = 0
    real: list[RealSuiteData] = Field(default_factory=lambda: [RealSuiteData()])
    level_label: Literal["highest", "met"] = Field(
        "highest",
        description="with orchestrator.executor_levels, which of the levels that select a "
        "teacher's executor (SFT data, and GRPO's guides) its label is: the highest, or the "
        "highest threshold the executor's expected success meets "
        "(easy_core.policies.levels.executor_level)",
    )

    trajectories: Literal["correct", "all"] = Field(
        "correct",
        description="whose turns become examples: the teacher's correct trajectories, or all of "
        "them (its rule whatever the outcome; keeping only the correct ones under-represents "
        "the retries of doubted subtasks, which happen on the tasks that fail more often)",
    )
    turns: Literal["all", "later"] = Field(
        "all",
        description="which turns become examples: all, or only those after the first (what to "
        "do with results: retry or answer), to teach adapting without moving a checkpoint's "
        "first plans",
    )

    @model_validator(mode="after")
    def _privileged_teacher_needs_the_flag(self) -> SftDataParams:
        _refuse_privileged([self.teacher], self.allow_privileged, "sft_data")
        return self


class RolloutParams(_Section):
    policy: str = "greedy"
    pool: str = SIM_POOLS[0]
    shards: int = Field(4, ge=1)
    episodes_per_shard: int = Field(500, ge=1)
    seed: int = 0
    tree_policy: str = Field("greedy-sample", description="a sampling policy for tree rollouts")
    tree_tasks: int = Field(200, ge=0, description="training tasks grown as trees (0: none)")
    tree_k: int = Field(2, ge=1, description="alternatives at each decision")
    tree_depth: int = Field(3, ge=1, description="decisions that branch")
    advantage_scope: Literal["siblings", "tree"] = "siblings"


class EvaluateParams(_Section):
    pools: list[str] = Field(default_factory=lambda: list(SIM_POOLS))
    policies: list[str] = Field(default_factory=lambda: list(BASELINE_POLICIES))
    n: int = Field(500, ge=1)
    seed: int = 0
    orchestrator_n: int = Field(
        0,
        ge=0,
        description="held-out tasks per pool on which the trained orchestrator (policy `easy` "
        "with each of `orchestrator_models`) is evaluated beside the policies; 0: it is not",
    )
    orchestrator_models: dict[str, str] = Field(
        default_factory=lambda: {"easy-sft": "models/sft", "easy-grpo": "models/grpo"},
        description="row name -> checkpoint the `easy` policy runs (the train stage's SFT and "
        "GRPO checkpoints)",
    )


class InferenceParams(_Section):
    pool: str = SIM_POOLS[0]
    policy: str = "greedy"


class PrefixParams(_Section):
    """The prefix-aware ordering benchmark (`easy bench prefix`)."""

    system_tokens: int = Field(600, ge=0, description="system prompt and executor card tokens")
    cache_tokens: int = Field(4000, ge=0, description="prefix cache size of one server")
    cached_speedup: float = Field(20.0, ge=1, description="prefill speed-up on cached tokens")
    cached_price: float = Field(0.1, ge=0, le=1, description="price of cached input tokens")
    max_bypass: int = Field(8, ge=0, description="times a step may be passed over")
    workflows: int = Field(200, ge=1)
    concurrent: int = Field(24, ge=1, description="workflows in flight at once")


class ReleaseParams(_Section):
    """Knobs of the release simulation and of the `tail_risk` scheduler."""

    # the objective: (1 - alpha_w) E[flow time] + alpha_w CVaR_beta[flow time]
    alpha_w: float = Field(
        0.25, ge=0, le=1, description="weight of CVaR against the mean in the objective"
    )
    beta: float = Field(
        0.7,
        gt=0,
        lt=1,
        description="CVaR level: the objective weighs the worst 1-beta tail of flow times; a "
        "lower beta acts on workflows heading for a wider tail",
    )
    kappa: float = Field(1.0, ge=0, description="scale of the CVaR term in the release index")
    contender_beta: float | None = Field(
        None,
        gt=0,
        le=1,
        description="in a burst, the share of contenders below the tail threshold; None: beta. "
        "Lower favours P95 over P99 (a few workflows wait longest so more finish sooner)",
    )
    tail_memory: int = Field(
        500, ge=1, description="finished workflows whose flow times give the tail threshold"
    )
    threshold_every: int = Field(
        10, ge=1, description="recompute the tail threshold every this many finished workflows"
    )
    # online estimates of step work and waiting
    prior_weight: float = Field(
        5.0, gt=0, description="pseudo-observations behind the latency-model prior of step work"
    )
    prior_cv: float = Field(0.5, ge=0, description="prior coefficient of variation of step work")
    size_aware: bool = Field(
        True, description="scale work estimates by each step's stated token sizes"
    )
    wait_rate: float = Field(
        0.02, gt=0, le=1, description="weight of each new observation in the mean wait"
    )
    # the in-flight window
    window_init: float | None = Field(
        None, ge=0, description="initial in-flight window per executor; None: Little's law"
    )
    window_gain: float = Field(
        0.5, ge=0, description="window decrease when released work waits behind a start"
    )
    window_max: float = Field(64.0, ge=0)
    # the simulated system
    dispatch_s: float = Field(
        0.1, ge=0, description="time from a release until the step reaches its executor"
    )
    capacity_scale: float = Field(
        0.5, gt=0, description="servers per executor relative to its max_concurrency"
    )


class SftParams(_Section):
    """SFT warm start of the LLM orchestrator (stage `train`, `easy train-sft`)."""

    base_model: str = Field(
        "smollm2-135m", description="a packaged model name or a checkpoint folder"
    )
    data: str = "data/sft/train.jsonl"
    out: str = "models/sft"
    max_examples: int = Field(64, ge=1)
    max_steps: int = Field(8, ge=1)
    learning_rate: float = Field(2e-4, gt=0)
    batch_size: int = Field(1, ge=1)
    grad_accum: int = Field(1, ge=1)
    max_length: int = Field(2048, ge=64)
    train_layers: int = Field(
        6, ge=0, description="top decoder layers trained, the rest frozen (0: all)"
    )
    lora: bool = False
    lora_r: int = Field(16, ge=1)
    lora_alpha: int = Field(32, ge=1)
    threads: int = Field(2, ge=1)
    seed: int = 0
    save_steps: int = Field(
        50,
        ge=0,
        description="keep a resumable trainer checkpoint every this many steps (0: none); a "
        "rerun with the same params and data goes on from the last one",
    )


class GrpoParams(_Section):
    """GRPO on tree rollouts (`easy train-grpo`); the group size is rollouts.tree_k."""

    base_model: str = Field("models/sft", description="the SFT checkpoint (or a packaged model)")
    out: str = "models/grpo"
    tasks: int = Field(8, ge=1, description="training tasks whose trees give the prompts")
    rollout: Literal["stored", "on_policy"] = Field(
        "stored",
        description="stored: prompts are the decision states of the rollouts stage's trees "
        "(grown by rollouts.tree_policy); on_policy: Tree-GRPO, each step grows its tasks' "
        "trees with the model being trained (TRL's rollout_func), every sibling group to "
        "tree_depth a GRPO group (easy_core.learning.tree_grpo)",
    )
    tree_depth: int = Field(
        1,
        ge=1,
        description="stored: prompts from tree nodes above this depth (1: the roots only); "
        "on_policy: the decisions that branch into rollouts.tree_k samples",
    )
    advantage_scope: Literal["siblings", "tree"] = Field(
        "siblings",
        description="on_policy: a sample's advantage against its siblings (GRPO's group), or "
        "against its siblings plus every sample of the task's tree (Tree-GRPO)",
    )
    prompts_per_step: int = Field(1, ge=1)
    max_steps: int = Field(2, ge=1)
    learning_rate: float = Field(1e-5, gt=0)
    beta: float = Field(0.04, ge=0, description="KL weight against the reference model")
    max_completion_length: int = Field(384, ge=16)
    temperature: float = Field(1.0, gt=0)
    executor_temperature: float | None = Field(
        None,
        gt=0,
        description="structured sampling: the temperature of the executor names alone (None: "
        "`temperature`); higher explores the executor choice a warm start has collapsed",
    )
    loss_tokens: Literal["all", "executors"] = Field(
        "all",
        description="the completion tokens the loss trains (structured sampling): all, or the "
        "executor names only (the choice the reward turns on; with all, the free-text "
        "instructions take most of the gradient)",
    )
    train_layers: int = Field(6, ge=0)
    lora: bool = False
    lora_r: int = Field(16, ge=1)
    use_vllm: bool = Field(False, description="GPU only: generation by `trl vllm-serve`")
    reward_worlds: int = Field(
        1,
        ge=1,
        description="a root prompt's completion is scored as its mean episode reward over this "
        "many simulated worlds (outcome seeds): the reward of the plan, not of one lucky draw",
    )
    structured: bool = Field(
        True,
        description="sample each group under its prompt's plan schema, as the `easy` policy "
        "decodes (in process; with use_vllm, TRL's own sampling)",
    )
    continuation: str = Field(
        "greedy-once",
        description="the policy that plays an episode on after the sampled turn (on_policy: "
        "below tree_depth; `self`: the model being trained, one sample); `greedy-once` "
        "never retries a doubted result, as the orchestrator's task grammar cannot, so a turn "
        "is scored by what the orchestrator itself could make of it",
    )
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group",
        description="advantage = reward - group mean, divided by the group's (or batch's) "
        "standard deviation, or by nothing (`none`, Dr. GRPO): when every sample of a group "
        "fails, dividing by its tiny spread turns cost noise into full-size advantages",
    )
    guide: list[str] = Field(
        default_factory=list,
        description="off-policy guidance (LUFFY): at each root prompt these policies' first "
        "plans are scored by the reward hook and the best one takes the place of the group's "
        "last sample; the group's advantages then say how much of it to learn ([]: none)",
    )
    renamed_pools: int = Field(
        0,
        ge=0,
        description="each root prompt is also shown with this many copies of the pool whose "
        "executors carry other names, cards in shuffled order (the reward maps them back): "
        "the policy must read the cards rather than learn the training pool's names",
    )
    random_pools: int = Field(
        0,
        ge=0,
        description="each root prompt is also shown with this many pools drawn at random "
        "(easy_core.random_pools: other names, capabilities, prices), scored in the simulator "
        "with the drawn pool",
    )
    fresh_names: bool = Field(
        False,
        description="every root is shown under names drawn afresh (easy_core.random_pools."
        "fresh_names), the training pool's own included, and so are the renamed and drawn "
        "pools: the policy can only copy a name from the cards (the recipe of an SFT "
        "checkpoint trained with sft_data.fresh_names); prompts below the roots are left out",
    )
    threads: int = Field(2, ge=1)
    seed: int = 0

    allow_privileged: bool = Field(
        False, description="let a privileged policy (the oracle) guide or continue episodes"
    )

    @model_validator(mode="after")
    def _privileged_guidance_needs_the_flag(self) -> GrpoParams:
        _refuse_privileged([*self.guide, self.continuation], self.allow_privileged, "grpo")
        return self

    @model_validator(mode="after")
    def _on_policy_trees_sample_in_process(self) -> GrpoParams:
        if self.continuation == "self" and self.rollout != "on_policy":
            raise ValueError("continuation: self (the trained model) needs rollout: on_policy")
        if self.rollout != "on_policy":
            return self
        if self.use_vllm or not self.structured:
            raise ValueError(
                "rollout: on_policy grows its trees in process under the plan schema: set "
                "structured: true and use_vllm: false"
            )
        if self.guide or self.renamed_pools or self.random_pools or self.reward_worlds > 1:
            raise ValueError(
                "rollout: on_policy scores each sample by its own subtree in the training "
                "pool: drop guide, renamed_pools and random_pools, and set reward_worlds: 1"
            )
        return self

    @model_validator(mode="after")
    def _executor_options_need_in_process_sampling(self) -> GrpoParams:
        aimed = (
            self.executor_temperature is not None
            or self.loss_tokens == "executors"
            or bool(self.guide)
        )
        if aimed and (self.use_vllm or not self.structured):
            raise ValueError(
                "executor_temperature, loss_tokens: executors and guide act in the in-process "
                "structured sampling only: set structured: true and use_vllm: false, or drop them"
            )
        return self


class OrchestratorParams(_Section):
    """The LLM orchestrator behind the `easy` policy."""

    model: str = Field(
        "models/sft", description="checkpoint folder, or a packaged model name (smollm2-135m)"
    )
    backend: Literal["hf", "openai"] = "hf"
    endpoint: str | None = Field(None, description="openai backend: base URL ending in /v1")
    api_key_env: str | None = None
    structured: bool = Field(
        True, description="openai backend: ask the server for JSON-schema-constrained output"
    )
    schema_format: Literal["json_schema", "json_object"] = Field(
        "json_schema",
        description="how the schema is sent: OpenAI-style json_schema (vLLM, OpenAI, llama.cpp's "
        "llama-server) or json_object with a `schema` field (llama-cpp-python's server)",
    )
    executor_last: bool = Field(
        False,
        description="the output contract writes a step's covers, instruction and inputs before "
        "its executor; a checkpoint is used with the order it was trained on (its "
        "easy-contract.json says which)",
    )
    subtask_estimates: bool = Field(
        False,
        description="the prompt lists under the task each subtask's expected success with "
        "every executor, cheapest first, as the cards and capability.difficulty_slope predict "
        "it (what greedy reads), so that choosing is copying a name from one line; a "
        "checkpoint is used with the prompt it was trained on (its easy-contract.json)",
    )
    ask_covered_questions: bool = Field(
        True,
        description="a model step that covers one declared subtask is asked that subtask's own "
        "question from the task, not the orchestrator's copy of it (tools, steps covering "
        "several subtasks and the sim suite keep what the orchestrator wrote; "
        "`policies/covered_questions.py`)",
    )
    executor_levels: bool = Field(
        False,
        description="a step's executor slot holds the expected success the step needs "
        "(cheapest, >=50% .. >=95%, best) and the runtime runs it on the cheapest executor "
        "whose card meets it (tasks with declared subtasks; `policies/levels.py`); a checkpoint "
        "is used with the contract it was trained on (its easy-contract.json)",
    )
    escalation_hints: bool = Field(
        False,
        description="the history says of each doubtful result whether the cards name an "
        "executor more likely to succeed on its subtask than every one tried (what `greedy` "
        "retries on), so the decision to retry is read from one line; a checkpoint is used "
        "with the prompt it was trained on (its easy-contract.json)",
    )
    max_new_tokens: int = Field(1024, ge=16)
    temperature: float = Field(0.0, ge=0)
    threads: int = Field(2, ge=1)
    batch_size: int = Field(
        8,
        ge=1,
        description="in process, simulated pools, greedy decoding: episodes advance in lockstep "
        "and this many turns share one generate call (`policies/lockstep.py`)",
    )
    extra_body: dict[str, Any] = Field(
        default_factory=dict,
        description="openai backend: server-specific request fields, e.g. {repeat_penalty: 1.0} "
        "for llama-cpp-python, whose default 1.1 penalises the tokens a JSON plan must repeat",
    )

    def contract(self) -> dict[str, bool]:
        """What a checkpoint trained under these settings has learnt to read and write (saved
        as its easy-contract.json)."""
        return {key: getattr(self, key) for key in CONTRACT_KEYS}


CONTRACT_KEYS = ("executor_last", "subtask_estimates", "executor_levels", "escalation_hints")


def read_contract(saved: dict[str, Any]) -> dict[str, bool]:
    """The contract in `saved` (an easy-contract.json or a teacher data summary): a key it
    lacks predates that setting, whose default is off."""
    return {key: bool(saved.get(key, False)) for key in CONTRACT_KEYS}


ReleaseRuleName = Literal["eager", "tail_risk", "prefix", "coact"]


class ServeParams(_Section):
    """`easy serve`: the OpenAI-compatible endpoint and its shared dispatcher."""

    policies: list[str] = Field(
        default_factory=lambda: ["greedy", "strongest", "cheapest", "random"],
        min_length=1,
        description="policies the endpoint serves, as model names; the first is the default",
    )
    suite: str = Field(
        "sim", description="the suite that turns a conversation's last user message into a task"
    )
    release: ReleaseRuleName = Field(
        "eager",
        description="which waiting step an executor runs next when a slot frees, across all "
        "requests: eager (FIFO), tail_risk (mean-CVaR index), prefix (shared prompt prefixes "
        "back to back), coact (task-contrastive embedding similarity)",
    )
    max_cost_usd: float = Field(0.05, gt=0, description="the most one request may spend")
    max_seconds: float = Field(600.0, gt=0, description="the longest one request may run")
    max_message_chars: int = Field(32_000, ge=1, description="longest message accepted")
    max_messages: int = Field(64, ge=1, description="most messages in one conversation")
    max_in_flight: int = Field(
        256, ge=1, description="requests running at once; more are refused with 429"
    )
    drain_s: float = Field(
        30.0, ge=0, description="on SIGTERM, how long in-flight requests may take to finish"
    )
    prefix_cache_tokens: int = Field(
        4000, ge=0, description="prefix release: the prefix cache of one executor it models"
    )
    prefix_cache_entries: int | None = Field(
        None,
        ge=1,
        description="prefix release: prompts one executor's cache holds (None: bounded in "
        "tokens only; 1 for llama-cpp-python's server, which reuses only its last prompt)",
    )
    max_bypass: int = Field(8, ge=0, description="prefix release: times a step may be passed")
    coact_contrast: float = Field(
        1.0, ge=0, description="coact: weight of similarity to other workers' paths"
    )
    coact_path: int = Field(8, ge=1, description="coact: recent steps that make a worker's path")


class Params(_Section):
    """params.yaml: one section per concern, grouped by the stage that reads it."""

    # the world and the runtime: every episode reads these (the evaluation reuse key)
    limits: LimitParams = LimitParams()
    runtime: RuntimeParams = RuntimeParams()
    resilience: ResilienceParams = ResilienceParams()
    capability: CapabilityParams = CapabilityParams()
    sim: SimParams = SimParams()
    executors: ExecutorParams = ExecutorParams()
    reward: RewardParams = RewardParams()
    policies: PolicyParams = PolicyParams()
    orchestrator: OrchestratorParams = OrchestratorParams()
    # stage `profile`
    profile: ProfileParams = ProfileParams()
    # stages `sft_data`, `rollouts`, `policies`, `train`
    sft_data: SftDataParams = SftDataParams()
    rollouts: RolloutParams = RolloutParams()
    policy_training: PolicyTrainingParams = PolicyTrainingParams()
    sft: SftParams = SftParams()
    grpo: GrpoParams = GrpoParams()
    # stage `evaluate`, the nightly deployment, `easy eval`
    evaluate: EvaluateParams = EvaluateParams()
    nightly: EvaluateParams = EvaluateParams(n=1000)
    eval: EvalParams = EvalParams()
    # the Prefect pipeline and the inference flow
    pipeline: PipelineParams = PipelineParams()
    inference: InferenceParams = InferenceParams()
    # benchmarks (`easy bench prefix`, `easy bench release`)
    prefix: PrefixParams = PrefixParams()
    release: ReleaseParams = ReleaseParams()
    # `easy serve`
    serve: ServeParams = ServeParams()

    def estimates_slope(self) -> float | None:
        """The difficulty slope of the prompt's per-subtask success estimates, None when the
        orchestrator's prompt has none (orchestrator.subtask_estimates)."""
        if not self.orchestrator.subtask_estimates:
            return None
        return self.capability.difficulty_slope

    def hints_slope(self) -> float | None:
        """The difficulty slope the history's escalation hints are read with, None when the
        orchestrator's prompt has none (orchestrator.escalation_hints)."""
        return self.capability.difficulty_slope if self.orchestrator.escalation_hints else None


def load_params(path: str | Path | None, overrides: Sequence[str] = ()) -> Params:
    """Read params.yaml (`None`: the embedded defaults) with `section.field=value` overrides."""
    if path is None:
        return validate_model({}, Params, "embedded defaults", overrides)
    return load_yaml_model(path, Params, overrides)
