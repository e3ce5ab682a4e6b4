"""Baseline policies: the reference points every learned policy is compared with.

All of them plan one step per subtask, mirroring the task's dependency DAG (so independent
subtasks run in parallel and every step gets its prerequisites' results); they differ in which
executor each step gets:

- `strongest`: one executor for the whole task, the most capable on its subtasks;
- `cheapest`: one executor for the whole task, the cheapest that is not useless on any subtask;
- `random`: a seeded random executor per step;
- `greedy`: per subtask, the cheapest executor whose expected success clears a threshold; it
  reads each step's self-check and retries doubted subtasks (and what depends on them) with a
  stronger executor in the next milestone;
- `oracle` (sim only): per subtask, the cheapest executor that will succeed for this seed.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from easy_core.capability import expected_success
from easy_core.errors import PolicyError
from easy_core.executors.simulated import SimExecutor
from easy_core.policies.base import EpisodeState
from easy_core.schemas import ExecutorProfile, Plan, Step, StepResult, Subtask, Task

USELESS_BELOW = 0.1


def subtask_success(state: EpisodeState, profile: ExecutorProfile, sub: Subtask) -> float:
    return estimates(state).success[sub.id, profile.name]


def subtask_cost(state: EpisodeState, profile: ExecutorProfile, sub: Subtask) -> float:
    return estimates(state).cost[sub.id, profile.name]


class Estimates:
    """Expected success and cost of every executor on every subtask of one task, from the
    profiles: what a cost-aware policy knows before it acts. Built once per episode."""

    def __init__(self, state: EpisodeState):
        task = state.task
        slope = state.params.capability.difficulty_slope
        self.success: dict[tuple[str, str], float] = {}
        self.cost: dict[tuple[str, str], float] = {}
        for sub in task.subtasks:
            context = sum(task.subtask(dep).output_tokens for dep in sub.depends_on)
            for profile in state.pool.profiles:
                key = (sub.id, profile.name)
                self.success[key] = expected_success(profile, sub.skill, sub.difficulty, slope)
                out = round(sub.output_tokens * profile.verbosity)
                self.cost[key] = profile.cost_usd(sub.input_tokens + context, out)


def estimates(state: EpisodeState) -> Estimates:
    table = state.scratch.get("estimates")
    if table is None:
        table = state.scratch["estimates"] = Estimates(state)
    return table


def latest_results(state: EpisodeState) -> dict[str, StepResult]:
    """The newest successful result for each subtask."""
    latest: dict[str, StepResult] = {}
    for milestone in state.milestones:
        for result in milestone.results:
            if result.status == "ok":
                for sub_id in result.covers:
                    latest[sub_id] = result
    return latest


def final_answer(state: EpisodeState) -> str:
    sink = state.task.sink
    result = latest_results(state).get(sink.id)
    if result is None:
        return ""
    return result.sub_answers.get(sink.id, result.output)


def downstream(task: Task, roots: set[str]) -> set[str]:
    marked = set(roots)
    for sub in task.subtasks:  # topological order
        if any(dep in marked for dep in sub.depends_on):
            marked.add(sub.id)
    return marked


class SubtaskPolicy:
    """One step per subtask along the task DAG; subclasses pick the executor."""

    name = "subtask"
    escalate = False

    async def act(self, state: EpisodeState) -> Plan:
        task = state.task
        if not task.subtasks:
            raise PolicyError(
                f"policy {self.name!r} plans over subtasks; task {task.id!r} defines none"
            )
        if not state.milestones:
            return self._plan(state, [sub.id for sub in task.subtasks], {}, "solve every subtask")
        latest = latest_results(state)
        if self.escalate and state.milestones_left > 0:
            # Rerunning the same executor would reproduce the same outcome: retry a doubted
            # subtask only where a stronger executor exists, plus whatever has no result yet.
            tried = _tried_executors(state)
            missing = {sub.id for sub in task.subtasks if sub.id not in latest}
            stronger = {
                sub.id
                for sub in task.subtasks
                if sub.id in latest
                and latest[sub.id].self_check is False
                and self._escalation(state, sub, tried[sub.id]) is not None
            }
            if stronger:
                affected = downstream(task, stronger | missing)
                redo = [sub.id for sub in task.subtasks if sub.id in affected]
                goal = "retry doubted subtasks: " + ", ".join(sorted(stronger))
                return self._plan(state, redo, latest, goal, escalate=stronger)
        return Plan(milestone="answer", final_answer=final_answer(state))

    def _plan(
        self,
        state: EpisodeState,
        sub_ids: list[str],
        latest: dict[str, StepResult],
        goal: str,
        escalate: set[str] = frozenset(),  # type: ignore[assignment]
    ) -> Plan:
        """Steps for `sub_ids`; subtasks in `escalate` move to a stronger executor, the others
        rerun on the executor they had (their inputs changed) or get a fresh choice."""
        task = state.task
        k = len(state.milestones) + 1
        redo = set(sub_ids)
        tried = _tried_executors(state)
        chooser = self.chooser(state)
        steps = []
        for sub_id in sub_ids:
            sub = task.subtask(sub_id)
            executor = None
            if sub_id in escalate:
                executor = self._escalation(state, sub, tried[sub_id])
            elif tried[sub_id]:
                executor = tried[sub_id][-1]
            executor = executor or chooser(sub)
            deps = [f"m{k}-{d}" if d in redo else latest[d].step_id for d in sub.depends_on]
            inputs = f" from the results of {', '.join(sub.depends_on)}" if sub.depends_on else ""
            steps.append(
                Step(
                    id=f"m{k}-{sub.id}",
                    executor=executor,
                    instruction=(
                        f"Solve {sub.id} ({sub.skill}, difficulty {sub.difficulty}/5){inputs}."
                    ),
                    depends_on=deps,
                    covers=[sub.id],
                )
            )
        return Plan(milestone=goal, steps=steps)

    def chooser(self, state: EpisodeState) -> Callable[[Subtask], str]:
        """The executor for each subtask of one plan."""
        return lambda sub: self.choose(state, sub)

    def choose(self, state: EpisodeState, sub: Subtask) -> str:
        raise NotImplementedError

    def _escalation(self, state: EpisodeState, sub: Subtask, tried: list[str]) -> str | None:
        """A cheapest-capable executor stronger than every one tried on `sub`, or None."""
        if not tried:
            return None
        profiles = state.pool.profiles
        floor = max(subtask_success(state, state.pool.profile(name), sub) for name in tried)
        stronger = [p for p in profiles if subtask_success(state, p, sub) > floor + 1e-9]
        if not stronger:
            return None
        return _cheapest_capable(state, sub, stronger).name


def _tried_executors(state: EpisodeState) -> dict[str, list[str]]:
    tried: dict[str, list[str]] = {sub.id: [] for sub in state.task.subtasks}
    for milestone in state.milestones:
        for step in milestone.plan.steps:
            for sub_id in step.covers or ():
                tried.setdefault(sub_id, []).append(step.executor)
    return tried


def _cheapest_capable(
    state: EpisodeState, sub: Subtask, profiles: list[ExecutorProfile]
) -> ExecutorProfile:
    threshold = state.params.policies.greedy_threshold
    capable = [p for p in profiles if subtask_success(state, p, sub) >= threshold]
    if capable:
        return min(capable, key=lambda p: (subtask_cost(state, p, sub), p.name))
    return max(profiles, key=lambda p: (subtask_success(state, p, sub), -p.price_out_per_1m))


class _SingleExecutorPolicy(SubtaskPolicy):
    """Uses one executor for every step of a task, chosen once per task."""

    def chooser(self, state: EpisodeState) -> Callable[[Subtask], str]:
        name = self.pick(state).name
        return lambda sub: name

    def pick(self, state: EpisodeState) -> ExecutorProfile:
        raise NotImplementedError


class StrongestPolicy(_SingleExecutorPolicy):
    name = "strongest"

    def pick(self, state: EpisodeState) -> ExecutorProfile:
        subs = state.task.subtasks
        return max(
            state.pool.profiles,
            key=lambda p: (
                sum(subtask_success(state, p, s) for s in subs),
                -sum(subtask_cost(state, p, s) for s in subs),
            ),
        )


class CheapestPolicy(_SingleExecutorPolicy):
    name = "cheapest"

    def pick(self, state: EpisodeState) -> ExecutorProfile:
        subs = state.task.subtasks
        useful = [
            p
            for p in state.pool.profiles
            if all(subtask_success(state, p, s) >= USELESS_BELOW for s in subs)
        ] or state.pool.profiles
        return min(useful, key=lambda p: (sum(subtask_cost(state, p, s) for s in subs), p.name))


class RandomPolicy(SubtaskPolicy):
    name = "random"

    def choose(self, state: EpisodeState, sub: Subtask) -> str:
        rng = random.Random(f"{state.seed}|{state.task.id}|{sub.id}|{len(state.milestones)}")
        return rng.choice(state.pool.profiles).name


class GreedyPolicy(SubtaskPolicy):
    name = "greedy"
    escalate = True

    def choose(self, state: EpisodeState, sub: Subtask) -> str:
        return _cheapest_capable(state, sub, state.pool.profiles).name


class OraclePolicy(SubtaskPolicy):
    name = "oracle"

    def choose(self, state: EpisodeState, sub: Subtask) -> str:
        executors = state.pool.executors
        sims = [e for e in executors.values() if isinstance(e, SimExecutor)]
        if len(sims) != len(executors) or state.task.suite != "sim":
            raise PolicyError(
                "policy 'oracle' knows outcomes only in the sim suite with sim executors"
            )
        world = sims[0].world
        winners = [
            e.profile for e in sims if world.would_succeed(state.seed, state.task, sub, e.profile)
        ]
        if winners:
            return min(winners, key=lambda p: (subtask_cost(state, p, sub), p.name)).name
        return max((e.profile for e in sims), key=lambda p: subtask_success(state, p, sub)).name


BASELINES: dict[str, Callable[[], SubtaskPolicy]] = {
    "strongest": StrongestPolicy,
    "cheapest": CheapestPolicy,
    "random": RandomPolicy,
    "greedy": GreedyPolicy,
    "oracle": OraclePolicy,
}
