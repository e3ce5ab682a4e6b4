"""LLM orchestrator checkpoints (e.g. SFT, then GRPO) and the baselines on the same held-out
tasks and seeds: success, cost, makespan, mean reward, the paired difference in mean reward
between the last checkpoint and the first, and between the last checkpoint and each baseline
(per task, with its 95% bootstrap interval). Choose checkpoints on the validation split and
report them on test, which no choice saw.
Given a folder, each evaluation is kept there and reused on the next run while its checkpoint,
the params its episodes read (not the training sections: evaluation.NOT_READ_BY_EPISODES), pool
and tasks are unchanged: a new GRPO checkpoint against the same SFT reference
costs only its own episodes, and a killed comparison keeps what it finished."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from easy_core.core.params import Params
from easy_core.core.schemas import EvalMetrics, Task, Trajectory
from easy_core.core.stats import paired_difference
from easy_core.evaluation.evaluator import EvalSpec, evaluate, evaluate_resumable
from easy_core.executors.hf_models import in_trained_contract
from easy_core.learning.checkpoints import checkpoint_digest
from easy_core.policies.batch import ProgressCallback
from easy_core.world.suites import get_suite


def compare_checkpoints(
    params: Params,
    pool: str | Path,
    models: dict[str, str],
    baselines: list[str],
    n: int,
    seed: int = 0,
    on_episode: ProgressCallback | None = None,
    runs_dir: str | Path | None = None,
    split: str = "test",
    first_task: int = 0,
) -> dict[str, Any]:
    """`models`: label -> checkpoint (the first is the reference of the difference).
    `runs_dir`: keep each evaluation in RUNS_DIR/<split>/<pool>/<label> and reuse it (module
    doc). Every policy plays tasks `first_task` .. `first_task + n - 1` of the split."""

    def run(
        name: str, policy: str, settings: Params, model: str | None
    ) -> tuple[EvalMetrics, list[Trajectory]]:
        spec = EvalSpec("sim", policy, pool, n, seed, split, first_task=first_task)
        if runs_dir is None:
            return evaluate(spec, settings, on_episode)
        identity = {"checkpoint": checkpoint_digest(model)} if model else None
        folder = Path(runs_dir) / split / Path(pool).stem / name
        return evaluate_resumable(spec, settings, folder, on_episode, identity)

    rows: list[dict[str, Any]] = []
    played: dict[str, list[Trajectory]] = {}
    for label, model in models.items():
        # each checkpoint reads the prompt and writes the plans it was trained on
        with_model = in_trained_contract(params, model)
        metrics, played[label] = run(label, "easy", with_model, model)
        rows.append({"name": label, "model": model, **metrics.model_dump()})
    for policy in baselines:
        metrics, played[policy] = run(policy, policy, params, None)
        rows.append({"name": policy, "model": None, **metrics.model_dump()})
    tasks = list(get_suite("sim", params).tasks(split, n, seed, start=first_task))
    for row in rows:
        row["executor_steps"] = executor_steps(played[row["name"]])
        row["subtasks_by"] = {
            attribute: executor_choices(played[row["name"]], tasks, attribute)
            for attribute in ("difficulty", "skill")
        }
        if "oracle" in played and row["name"] != "oracle":
            row["oracle_agreement"] = oracle_agreement(played[row["name"]], played["oracle"])
    rewards = {name: [t.reward.total for t in runs] for name, runs in played.items()}
    labels = list(models)
    result: dict[str, Any] = {
        "pool": str(pool),
        "n": n,
        "first_task": first_task,
        "seed": seed,
        "split": split,
        "rows": rows,
    }
    if len(labels) > 1:
        result["difference"] = _paired(rewards, labels[-1], labels[0])
    if labels:
        result["against_baselines"] = [_paired(rewards, labels[-1], b) for b in baselines]
    return result


def executor_steps(trajectories: list[Trajectory]) -> dict[str, int]:
    """How many executed steps each executor ran, most used first: a checkpoint whose steps
    all land on one executor has learnt the `strongest` (or `cheapest`) rule, not a choice."""
    counts = Counter(
        result.executor for t in trajectories for m in t.milestones for result in m.results
    )
    return dict(counts.most_common())


def executor_choices(
    trajectories: list[Trajectory], tasks: list[Task], attribute: str
) -> dict[str, dict[str, int]]:
    """Subtasks given to each executor, grouped by the subtask's `attribute` (difficulty or
    skill): whether a policy's choice moves with what the subtask needs."""
    subtasks = {(task.id, sub.id): sub for task in tasks for sub in task.subtasks}
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for trajectory in trajectories:
        for subtask, executor in _executor_by_subtask(trajectory).items():
            value = getattr(subtasks[trajectory.task_id, subtask], attribute)
            counts[str(value)][executor] += 1
    return {value: dict(counts[value].most_common()) for value in sorted(counts)}


def oracle_agreement(trajectories: list[Trajectory], oracle: list[Trajectory]) -> dict[str, Any]:
    """On the same tasks, how often a policy's executor for a subtask is the oracle's (the
    cheapest executor that succeeds on it), over the subtasks both covered."""
    same = shared = 0
    for mine, best in zip(trajectories, oracle, strict=True):
        if mine.task_id != best.task_id:
            raise ValueError(f"tasks differ: {mine.task_id} against {best.task_id}")
        chosen, best_choice = _executor_by_subtask(mine), _executor_by_subtask(best)
        both = chosen.keys() & best_choice.keys()
        shared += len(both)
        same += sum(chosen[s] == best_choice[s] for s in both)
    return {"same": same, "subtasks": shared, "share": same / shared if shared else 0.0}


def _executor_by_subtask(trajectory: Trajectory) -> dict[str, str]:
    """The executor of the last step that covered each subtask (a retry's replaces the first)."""
    return {
        subtask: result.executor
        for m in trajectory.milestones
        for result in m.results
        for subtask in result.covers
    }


def choose_checkpoint(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The checkpoint with the highest mean reward averaged over the pools of `results` (one
    comparison per pool, same checkpoints); a tie keeps the earlier (simpler) one. Meant for
    the validation split: the chosen checkpoint is then reported on test."""
    labels = [row["name"] for row in results[0]["rows"] if row["model"]] if results else []
    if not labels:
        raise ValueError("no checkpoint to choose from: pass at least one --model")
    split = {r.get("split", "test") for r in results}
    by_label = {
        label: sum(_row(r, label)["mean_reward"] for r in results) / len(results)
        for label in labels
    }
    chosen = max(labels, key=lambda label: (by_label[label], -labels.index(label)))
    return {"chosen": chosen, "split": sorted(split), "mean_reward_over_pools": by_label}


def choice_markdown(choice: dict[str, Any]) -> str:
    rewards = ", ".join(f"{k} {v:.3f}" for k, v in choice["mean_reward_over_pools"].items())
    return (
        f"Chosen on the {'/'.join(choice['split'])} split: **{choice['chosen']}** (mean reward "
        f"over the pools: {rewards}); report it with `--split test`.\n"
    )


def _task_range(result: dict[str, Any]) -> str:
    first, n = result.get("first_task", 0), result["n"]
    return f"{n} sim tasks" + (f" (tasks {first}-{first + n - 1})" if first else "")


def _row(result: dict[str, Any], name: str) -> dict[str, Any]:
    return next(row for row in result["rows"] if row["name"] == name)


def _paired(rewards: dict[str, list[float]], of: str, against: str) -> dict[str, Any]:
    diff, interval = paired_difference(rewards[against], rewards[of])
    pairs = list(zip(rewards[against], rewards[of], strict=True))
    return {
        "of": of,
        "against": against,
        "mean_reward": diff,
        "ci95": interval,
        "tasks_better": sum(b > a for a, b in pairs),
        "tasks_worse": sum(b < a for a, b in pairs),
    }


def _difference_line(d: dict[str, Any]) -> str:
    low, high = d["ci95"]
    return (
        f"Mean reward, {d['of']} - {d['against']} on the same tasks: "
        f"**{d['mean_reward']:+.4f}** (95% bootstrap interval {low:+.4f} to {high:+.4f}; "
        f"better on {d['tasks_better']} tasks, worse on {d['tasks_worse']})."
    )


def comparison_markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Pool `{result['pool']}`, {_task_range(result)} of the {result.get('split', 'test')} "
        f"split (seed {result['seed']}).",
        "",
        "| orchestrator | success | 95% interval | mean cost (USD) | mean makespan (s) "
        "| mean reward | invalid-plan ends | steps by executor "
        "| subtasks on the oracle's executor |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        low, high = row["success_ci95"]
        steps = ", ".join(
            f"{name} {count}" for name, count in row.get("executor_steps", {}).items()
        )
        agreement = row.get("oracle_agreement")
        agreed = f"{agreement['same']} of {agreement['subtasks']}" if agreement else ""
        lines.append(
            f"| {row['name']} | {row['success_rate']:.3f} | {low:.2f}-{high:.2f} "
            f"| {row['mean_cost_usd']:.4f} | {row['mean_makespan_s']:.1f} "
            f"| {row['mean_reward']:.3f} | {row['end_reasons'].get('invalid_plan', 0)} "
            f"| {steps} | {agreed} |"
        )
    for row in result["rows"]:
        by_difficulty = row.get("subtasks_by", {}).get("difficulty")
        if by_difficulty and (row["model"] or row["name"] == "oracle"):
            cells = "; ".join(
                f"{level}: " + ", ".join(f"{name} {count}" for name, count in executors.items())
                for level, executors in by_difficulty.items()
            )
            lines += ["", f"Subtasks of {row['name']} by difficulty and executor: {cells}."]
    differences = [result["difference"]] if "difference" in result else []
    differences += result.get("against_baselines", [])
    if differences:
        lines.append("")
        lines += [f"- {_difference_line(d)}" for d in differences]
    return "\n".join(lines) + "\n"


def comparison_plot(results: list[dict[str, Any]], path: str | Path) -> Path:
    """Mean reward of every orchestrator, one panel per pool."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from easy_core.evaluation.plots import save_figure

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.6), squeeze=False)
    for ax, result in zip(axes[0], results, strict=True):
        names = [row["name"] for row in result["rows"]]
        colors = ["tab:blue" if row["model"] else "tab:gray" for row in result["rows"]]
        ax.bar(names, [row["mean_reward"] for row in result["rows"]], color=colors)
        split = result.get("split", "test")
        ax.set_title(f"{Path(result['pool']).stem}, {result['n']} {split} tasks")
        ax.set_ylabel("mean reward")
        ax.tick_params(axis="x", rotation=30)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("LLM orchestrator checkpoints (blue) and baselines (gray)")
    return save_figure(fig, path)
