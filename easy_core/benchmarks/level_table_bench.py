"""How much a choice of levels per step can gain over `greedy`: a level per (skill, difficulty)
tuned by coordinate ascent on the mean reward of a validation split (`LevelTablePolicy`), then
evaluated, fixed, on tasks no choice saw. It bounds what a levels checkpoint that reads only a
step's skill and difficulty can learn, and it is the reference such a checkpoint is compared
with: a checkpoint that matches it has learnt a table, not a reason to choose."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from easy_core.core.errors import ConfigError
from easy_core.core.params import Params
from easy_core.core.schemas import Task, Trajectory
from easy_core.core.stats import mean, paired_difference, wilson_interval
from easy_core.core.storage import write_json
from easy_core.executors.pool import load_pool
from easy_core.plans.prompting import LEVELS
from easy_core.policies import Policy
from easy_core.policies.batch import run_episodes
from easy_core.policies.levels import LevelCell, LevelTable, LevelTablePolicy, level_cell
from easy_core.runtime.episode import EpisodeRunner
from easy_core.world.suites import get_suite
from easy_core.world.suites.sim import SimSuite

BASELINES = ("greedy", "strongest", "oracle")


class _Split:
    """The same tasks on every pool, and one runner per pool."""

    def __init__(self, params: Params, pools: Sequence[Path], split: str, n: int, seed: int):
        suite = get_suite("sim", params)
        self.tasks = list(suite.tasks(split, n, seed))
        self.pools = [str(p) for p in pools]
        self.runners = [EpisodeRunner(load_pool(p, params), params, SimSuite.check) for p in pools]
        self.seed = seed

    def episodes(self, policy: str | Policy) -> list[list[Trajectory]]:
        """Per pool, the policy's episodes on the tasks."""
        return [run_episodes(self.tasks, runner, policy, self.seed) for runner in self.runners]


def tune_level_table(
    params: Params,
    pools: Sequence[Path],
    n: int,
    seed: int = 0,
    sweeps: int = 3,
    on_trial: Callable[[int], None] | None = None,
    by_sink: bool = False,
) -> LevelTable:
    """The table of levels per (skill, difficulty) with the highest mean reward over `pools` on
    the first `n` validation tasks: from greedy's level everywhere, each cell in turn set to
    the level that scores best with the others fixed, until a sweep changes nothing."""
    data = _Split(params, pools, "validation", n, seed)
    cells = _cells(data.tasks, by_sink)
    start = next(
        (name for name, value in LEVELS.items() if value == params.policies.greedy_threshold),
        None,
    )
    if start is None:
        raise ConfigError(
            f"policies.greedy_threshold {params.policies.greedy_threshold} is no level; the "
            f"table starts from greedy's rule: set it to one of {sorted(set(LEVELS.values()))}"
        )
    table = dict.fromkeys(cells, start)

    def score(candidate: LevelTable) -> float:
        if on_trial is not None:
            on_trial(1)
        episodes = data.episodes(LevelTablePolicy(candidate))
        return mean([mean([t.reward.total for t in pool]) for pool in episodes])

    best = score(table)
    for _ in range(sweeps):
        changed = False
        for cell in cells:
            for level in LEVELS:
                if level == table[cell]:
                    continue
                trial = table | {cell: level}
                value = score(trial)
                if value > best + 1e-12:
                    best, table, changed = value, trial, True
        if not changed:
            break
    return table


def tuning_trials(
    params: Params, n: int, seed: int = 0, sweeps: int = 3, by_sink: bool = False
) -> int:
    """The most table evaluations `tune_level_table` makes (for a progress bar)."""
    cells = _cells(get_suite("sim", params).tasks("validation", n, seed), by_sink)
    return 1 + sweeps * len(cells) * (len(LEVELS) - 1)


def _cells(tasks: Iterable[Task], by_sink: bool) -> list[LevelCell]:
    """Every table cell the tasks' subtasks fall in, in a fixed order."""
    return sorted({level_cell(task, sub, by_sink) for task in tasks for sub in task.subtasks})


def evaluate_level_table(
    params: Params, pools: Sequence[Path], table: LevelTable, split: str, n: int, seed: int = 0
) -> dict[str, Any]:
    """The table against greedy, strongest and the oracle on the same tasks of each pool:
    mean reward, success with its Wilson interval, and the paired difference in mean reward
    with its 95% bootstrap interval."""
    data = _Split(params, pools, split, n, seed)
    policies: dict[str, str | Policy] = {"level-table": LevelTablePolicy(table)}
    policies |= {name: name for name in BASELINES}
    episodes = {name: data.episodes(policy) for name, policy in policies.items()}
    rewards = {name: [[t.reward.total for t in pool] for pool in runs]
               for name, runs in episodes.items()}  # fmt: skip
    report: dict[str, Any] = {"split": split, "n": n, "seed": seed, "pools": []}
    for index, pool in enumerate(data.pools):
        rows = []
        for name in policies:
            ours, theirs = rewards["level-table"][index], rewards[name][index]
            successes = sum(t.correct for t in episodes[name][index])
            row = {
                "policy": name,
                "mean_reward": mean(theirs),
                "success": successes / n,
                "success_ci95": wilson_interval(successes, n),
            }
            if name != "level-table":
                diff, interval = paired_difference(theirs, ours)
                row |= {"table_minus_it": diff, "table_minus_it_ci95": interval}
            rows.append(row)
        report["pools"].append({"pool": pool, "rows": rows})
    return report


def save_table(table: LevelTable, path: Path) -> None:
    cells = [{"skill": s, "difficulty": d, "sink": sink, "level": level}
             for (s, d, sink), level in table.items()]  # fmt: skip
    write_json(path, {"cells": cells})


def load_table(path: Path) -> LevelTable:
    if not path.exists():
        raise ConfigError(
            f"no level table at {path}: tune one with `easy bench level-table --split "
            "validation --out DIR` (it writes DIR/table.json)"
        )
    try:
        cells = json.loads(path.read_text())["cells"]
        return {(c["skill"], int(c["difficulty"]), c.get("sink")): c["level"] for c in cells}
    except (KeyError, TypeError, ValueError) as error:  # JSONDecodeError is a ValueError
        raise ConfigError(
            f"{path} is not a level table ({error}): expected {{'cells': [{{'skill', "
            "'difficulty', 'level'}}]}} as `easy bench level-table` writes it"
        ) from error


def level_table_markdown(table: LevelTable, report: dict[str, Any], tuned_here: bool) -> str:
    rows = sorted({(skill, sink) for skill, _, sink in table}, key=lambda r: (r[0], str(r[1])))
    difficulties = sorted({d for _, d, _ in table})
    lines = ["| skill | " + " | ".join(f"difficulty {d}" for d in difficulties) + " |"]
    lines.append("|---" * (len(difficulties) + 1) + "|")
    for skill, sink in rows:
        cells = [table.get((skill, d, sink), "-") for d in difficulties]
        name = skill if sink is None else f"{skill} ({'sink' if sink else 'needed by others'})"
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    where = (
        "in sample: the table was tuned on these tasks"
        if tuned_here
        else "tasks no choice of the table saw"
    )
    lines += ["", f"{report['n']} tasks of the {report['split']} split per pool ({where})."]
    for pool in report["pools"]:
        lines += ["", f"Pool `{pool['pool']}`:", ""]
        lines += [
            "| policy | mean reward | success (95% CI) | table minus it (95% CI) |",
            "|---|---|---|---|",
        ]
        for row in pool["rows"]:
            low, high = row["success_ci95"]
            diff = ""
            if "table_minus_it" in row:
                d_low, d_high = row["table_minus_it_ci95"]
                diff = f"{row['table_minus_it']:+.4f} ({d_low:+.4f}..{d_high:+.4f})"
            lines.append(
                f"| {row['policy']} | {row['mean_reward']:.4f} | "
                f"{row['success']:.3f} ({low:.2f}-{high:.2f}) | {diff} |"
            )
    return "\n".join(lines) + "\n"
