"""Escalation hints (`orchestrator.escalation_hints`) and teacher data from all trajectories
(`sft_data.trajectories: all`): the levers that teach a checkpoint to retry a doubted subtask
where its teacher would, instead of answering at once."""

from __future__ import annotations

import json
from pathlib import Path

from easy_core.core.params import Params
from easy_core.executors.pool import load_pool
from easy_core.plans.prompting import orchestrator_messages
from easy_core.policies.batch import run_episodes
from easy_core.runtime.episode import EpisodeRunner
from easy_core.world.suites.sim import SimSuite
from tests.conftest import SIM_DEFAULT


def _with(params: Params, **orchestrator: object) -> Params:
    return params.model_copy(
        update={"orchestrator": params.orchestrator.model_copy(update=orchestrator)}
    )


def _history(params: Params, task, profiles, milestones) -> str:  # noqa: ANN001
    return orchestrator_messages(params, task, profiles, milestones)[-1]["content"].split(
        "History:"
    )[1]


def test_the_hint_says_where_greedy_retries(params: Params) -> None:
    """After greedy's first milestone, the history says "stronger executor left" exactly on the
    tasks greedy then retries (a doubted subtask with a stronger executor to move to), and a
    doubted result on the most reliable executor says "none stronger left". Without the
    setting the history says neither."""
    pool = load_pool(SIM_DEFAULT, params)
    tasks = list(SimSuite(params.sim).tasks("validation", 40, 0))
    trajectories = run_episodes(tasks, EpisodeRunner(pool, params, SimSuite.check), "greedy", 0)
    hinted = _with(params, escalation_hints=True)
    seen = {"retried": 0, "answered with a doubt": 0}
    for task, trajectory in zip(tasks, trajectories, strict=True):
        first = trajectory.milestones[:1]
        history = _history(hinted, task, pool.profiles, first)
        retried = len(trajectory.milestones) > 1
        assert ("stronger executor left" in history) == retried, task.id
        if retried:
            seen["retried"] += 1
        elif "doubtful" in history:
            assert "none stronger left" in history
            seen["answered with a doubt"] += 1
        plain = _history(params, task, pool.profiles, first)
        assert "stronger" not in plain
    assert min(seen.values()) >= 2, seen


def test_teacher_data_from_all_trajectories_keeps_the_retries(
    params: Params, tmp_path: Path
) -> None:
    """`sft_data.trajectories: all` writes the turns of the teacher's failed trajectories too,
    and with the hints every later turn that retries follows a hinted history, and every
    hinted one retries; the summary records both settings for the checkpoint's contract."""
    from easy_core.learning.teacher_data import write_teacher_dataset

    counts, rows = {}, {}
    for keep in ("correct", "all"):
        data = params.sft_data.model_copy(update={"n_tasks": 30, "real": [], "trajectories": keep})
        settings = _with(params, escalation_hints=True).model_copy(update={"sft_data": data})
        summary = write_teacher_dataset(settings, tmp_path / keep)
        assert summary["trajectories"] == keep and summary["escalation_hints"] is True
        rows[keep] = [json.loads(line) for line in (tmp_path / keep / "train.jsonl").open()]
        counts[keep] = summary["suites"]["sim"]["successful_trajectories"]
    assert counts["correct"] < 30, "every teacher trajectory succeeded: nothing to tell apart"
    assert len({r["task_id"] for r in rows["all"]}) == 30
    assert len({r["task_id"] for r in rows["correct"]}) == counts["correct"]
    later = [r for r in rows["all"] if r["turn"] > 0]
    retries = 0
    for row in later:
        last = row["messages"][-2]["content"].split("Milestone ")[-1]
        retry = bool(json.loads(row["messages"][-1]["content"])["steps"])
        assert retry == ("stronger executor left" in last), row["task_id"]
        retries += retry
    assert retries >= 2


def test_later_turns_only_leave_the_first_plans_out(params: Params, tmp_path: Path) -> None:
    """`sft_data.turns: later` writes exactly the turns after the first that `all` writes."""
    from easy_core.learning.teacher_data import write_teacher_dataset

    rows = {}
    for turns in ("all", "later"):
        data = params.sft_data.model_copy(update={"n_tasks": 12, "real": [], "turns": turns})
        write_teacher_dataset(params.model_copy(update={"sft_data": data}), tmp_path / turns)
        rows[turns] = [json.loads(line) for line in (tmp_path / turns / "train.jsonl").open()]
    assert any(r["turn"] == 0 for r in rows["all"])
    assert rows["later"] == [r for r in rows["all"] if r["turn"] > 0] != []
