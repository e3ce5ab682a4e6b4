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
from collections.abc import Callable, Sequence
from typing import NamedTuple

from easy_core.core.capability import shifted_success
from easy_core.core.errors import PolicyError
from easy_core.core.params import Params
from easy_core.core.schemas import ExecutorProfile, Plan, StepResult, Subtask, Task
from easy_core.plans.structured import latest_good_results, step_id
from easy_core.runtime.policy import EpisodeState, OutcomeOracle, RecordedOutcomeOracle

USELESS_BELOW = 0.1


class Option(NamedTuple):
    """One executor for one subtask, as the profiles predict it. Fields in this order so that
    options sort cheapest first, ties by name."""

    cost: float
    executor: str
    success: float
    price: float


def subtask_options(
    task: Task, sub: Subtask, profiles: Sequence[ExecutorProfile], difficulty_slope: float
) -> tuple[list[Option], list[Option]]:
    """Every executor's option on one subtask, cheapest first: those that declare the
    subtask's skill (a capability entry, even a measured 0), and those that do not. Choices
    come from the declaring ones: a game tool is no candidate for a math step."""
    tokens_in = sub.input_tokens + sum(task.subtask(dep).output_tokens for dep in sub.depends_on)
    skill, difficulty, tokens_out = sub.skill, sub.difficulty, sub.output_tokens
    options, undeclared = [], []
    for p in profiles:
        base, price_out = p.capability.get(skill), p.price_out_per_1m
        (options if base is not None else undeclared).append(
            Option(
                (
                    tokens_in * p.price_in_per_1m
                    + round(tokens_out * p.verbosity) * p.price_out_per_1m
                )
                / 1e6,
                p.name,
                shifted_success(base.success if base else 0.0, difficulty, difficulty_slope),
                price_out,
            )
        )
    return sorted(options), sorted(undeclared)


def greedy_executor(
    task: Task, sub: Subtask, profiles: Sequence[ExecutorProfile], params: Params
) -> str:
    """The `greedy` baseline's choice for one subtask: the cheapest executor whose expected
    success clears `params.policies.greedy_threshold`, else the most likely to succeed."""
    options, undeclared = subtask_options(task, sub, profiles, params.capability.difficulty_slope)
    return cheapest_capable(options or undeclared, params.policies.greedy_threshold).executor


class Estimates:
    """Expected success and cost of every executor on every subtask of one task, from the
    profiles: what a cost-aware policy knows before it acts. Built once per episode."""

    def __init__(self, state: EpisodeState):
        task = state.task
        slope = state.params.capability.difficulty_slope
        self.options: dict[str, list[Option]] = {}  # per subtask, cheapest first
        self._by_name: dict[str, dict[str, Option]] = {}
        self._undeclared: dict[str, list[Option]] = {}
        profiles = state.pool.profiles
        for sub in task.subtasks:
            options, undeclared = subtask_options(task, sub, profiles, slope)
            self.options[sub.id] = options or undeclared
            self._undeclared[sub.id] = undeclared if options else []

    def by_name(self, sub_id: str) -> dict[str, Option]:
        """Every executor's option on `sub_id`, declaring the skill or not."""
        table = self._by_name.get(sub_id)
        if table is None:
            every = self.options[sub_id] + self._undeclared[sub_id]
            table = self._by_name[sub_id] = {o.executor: o for o in every}
        return table


def estimates(state: EpisodeState) -> Estimates:
    table = state.scratch.get("estimates")
    if table is None:
        table = state.scratch["estimates"] = Estimates(state)
    return table


def cheapest_capable(options: list[Option], threshold: float) -> Option:
    """The cheapest option whose expected success clears `threshold`, else the most likely to
    succeed. `options` are sorted cheapest first."""
    for option in options:
        if option.success >= threshold:
            return option
    return max(options, key=lambda o: (o.success, -o.price))


def latest_results(state: EpisodeState) -> dict[str, StepResult]:
    """The newest successful result for each subtask."""
    return latest_good_results(state.milestones)


def final_answer(state: EpisodeState, latest: dict[str, StepResult] | None = None) -> str:
    sink = state.task.sink
    result = (latest if latest is not None else latest_results(state)).get(sink.id)
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
    synchronous = True  # never waits: episodes can run on a discrete-event clock

    async def act(self, state: EpisodeState) -> Plan:
        task = state.task
        if not task.subtasks:
            raise PolicyError(
                f"policy {self.name!r} plans over subtasks; task {task.id!r} defines none"
            )
        tried = _tried_executors(state)
        if not state.milestones:
            all_ids = [sub.id for sub in task.subtasks]
            return self._plan(state, all_ids, {}, tried, {}, "solve every subtask")
        latest = latest_results(state)
        if self.escalate and state.milestones_left > 0:
            # Rerunning the same executor would reproduce the same outcome: retry a doubted
            # subtask only where a stronger executor exists, plus whatever has no result yet.
            escalations = {}
            for sub in task.subtasks:
                result = latest.get(sub.id)
                if result is not None and result.self_check is False:
                    stronger = self._escalation(state, sub, tried[sub.id])
                    if stronger is not None:
                        escalations[sub.id] = stronger
            if escalations:
                missing = {sub.id for sub in task.subtasks if sub.id not in latest}
                affected = downstream(task, set(escalations) | missing)
                redo = [sub.id for sub in task.subtasks if sub.id in affected]
                goal = "retry doubted subtasks: " + ", ".join(sorted(escalations))
                return self._plan(state, redo, latest, tried, escalations, goal)
        return Plan(milestone="answer", final_answer=final_answer(state, latest))

    def _plan(
        self,
        state: EpisodeState,
        sub_ids: list[str],
        latest: dict[str, StepResult],
        tried: dict[str, list[str]],
        escalations: dict[str, str],
        goal: str,
    ) -> Plan:
        """Steps for `sub_ids`: a subtask in `escalations` moves to the executor given there,
        the others rerun on the executor they had (their inputs changed) or get a choice."""
        task = state.task
        k = len(state.milestones) + 1
        redo = set(sub_ids)
        chooser = self.chooser(state)
        steps = []
        for sub_id in sub_ids:
            sub = task.subtask(sub_id)
            if sub_id in escalations:
                executor = escalations[sub_id]
            elif tried[sub_id]:
                executor = tried[sub_id][-1]
            else:
                executor = chooser(sub)
            deps = [step_id(k, d) if d in redo else latest[d].step_id for d in sub.depends_on]
            inputs = f" from the results of {', '.join(sub.depends_on)}" if sub.depends_on else ""
            steps.append(
                {
                    "id": step_id(k, sub.id),
                    "executor": executor,
                    "instruction": sub.instruction
                    or f"Solve {sub.id} ({sub.skill}, difficulty {sub.difficulty}/5){inputs}.",
                    "depends_on": deps,
                    "covers": [sub.id],
                }
            )
        # One validation call for the whole plan is much cheaper than one per step.
        return Plan.model_validate({"milestone": goal, "steps": steps})

    def chooser(self, state: EpisodeState) -> Callable[[Subtask], str]:
        """The executor for each subtask of one plan."""
        return lambda sub: self.choose(state, sub)

    def choose(self, state: EpisodeState, sub: Subtask) -> str:
        raise NotImplementedError

    def _escalation(self, state: EpisodeState, sub: Subtask, tried: list[str]) -> str | None:
        """A cheapest-capable executor stronger than every one tried on `sub`, or None."""
        if not tried:
            return None
        table = estimates(state)
        by_name = table.by_name(sub.id)
        floor = max(by_name[name].success for name in tried)
        stronger = [o for o in table.options[sub.id] if o.success > floor + 1e-9]
        if not stronger:
            return None
        return cheapest_capable(stronger, state.params.policies.greedy_threshold).executor


def _tried_executors(state: EpisodeState) -> dict[str, list[str]]:
    tried: dict[str, list[str]] = {sub.id: [] for sub in state.task.subtasks}
    for milestone in state.milestones:
        for step in milestone.plan.steps:
            for sub_id in step.covers or ():
                tried.setdefault(sub_id, []).append(step.executor)
    return tried


class _SingleExecutorPolicy(SubtaskPolicy):
    """Uses one executor for every step of a task, chosen once per task. A step whose skill
    that executor does not declare (a game move's state for a model, a move for the game tool)
    goes to the executor the same rule picks among those that declare the skill, so "always
    the strongest model" still hands the game's steps to the game."""

    def chooser(self, state: EpisodeState) -> Callable[[Subtask], str]:
        subs = state.task.subtasks
        primary = self.pick(state, self.candidates(state), subs)
        by_skill: dict[str, str] = {}

        def choose(sub: Subtask) -> str:
            if sub.skill in primary.capability:
                return primary.name
            if sub.skill not in by_skill:
                declaring = [p for p in state.pool.profiles if sub.skill in p.capability]
                same_skill = [s for s in subs if s.skill == sub.skill]
                by_skill[sub.skill] = (
                    self.pick(state, declaring, same_skill).name if declaring else primary.name
                )
            return by_skill[sub.skill]

        return choose

    def pick(
        self, state: EpisodeState, candidates: list[ExecutorProfile], subs: list[Subtask]
    ) -> ExecutorProfile:
        raise NotImplementedError

    @staticmethod
    def candidates(state: EpisodeState) -> list[ExecutorProfile]:
        """Executors that declare every skill of the task, else any of them, else all."""
        skills = {sub.skill for sub in state.task.subtasks}
        profiles = state.pool.profiles
        every = [p for p in profiles if skills <= p.capability.keys()]
        return every or [p for p in profiles if skills & p.capability.keys()] or profiles


class StrongestPolicy(_SingleExecutorPolicy):
    name = "strongest"

    def pick(
        self, state: EpisodeState, candidates: list[ExecutorProfile], subs: list[Subtask]
    ) -> ExecutorProfile:
        table = estimates(state)
        return max(
            candidates,
            key=lambda p: (
                sum(table.by_name(s.id)[p.name].success for s in subs),
                -sum(table.by_name(s.id)[p.name].cost for s in subs),
            ),
        )


class CheapestPolicy(_SingleExecutorPolicy):
    name = "cheapest"

    def pick(
        self, state: EpisodeState, candidates: list[ExecutorProfile], subs: list[Subtask]
    ) -> ExecutorProfile:
        table = estimates(state)
        useful = [
            p
            for p in candidates
            if all(table.by_name(s.id)[p.name].success >= USELESS_BELOW for s in subs)
        ] or candidates
        return min(
            useful, key=lambda p: (sum(table.by_name(s.id)[p.name].cost for s in subs), p.name)
        )


class RandomPolicy(SubtaskPolicy):
    name = "random"

    def choose(self, state: EpisodeState, sub: Subtask) -> str:
        rng = random.Random(f"{state.seed}|{state.task.id}|{sub.id}|{len(state.milestones)}")
        candidates = [p for p in state.pool.profiles if sub.skill in p.capability]
        return rng.choice(candidates or state.pool.profiles).name


class GreedyPolicy(SubtaskPolicy):
    name = "greedy"
    escalate = True

    def choose(self, state: EpisodeState, sub: Subtask) -> str:
        options = estimates(state).options[sub.id]
        return cheapest_capable(options, state.params.policies.greedy_threshold).executor


class GreedyOncePolicy(GreedyPolicy):
    """`greedy` without its retries: one milestone of every subtask, then the answer."""

    name = "greedy-once"
    escalate = False


class OraclePolicy(SubtaskPolicy):
    """The upper bound: per subtask the cheapest executor that will succeed in this episode's
    simulated world. The only privileged policy: the episode loop hands it the outcomes, and
    nothing else can reach them."""

    name = "oracle"
    privileged = True

    async def act(self, state: EpisodeState) -> Plan:
        raise PolicyError(
            "policy 'oracle' reads outcomes: only the episode loop may run it "
            "(act_with_outcomes), in the sim suite with sim executors"
        )

    async def act_with_outcomes(
        self, state: EpisodeState, outcomes: OutcomeOracle | RecordedOutcomeOracle | None
    ) -> Plan:
        if outcomes is None:
            raise PolicyError(
                "policy 'oracle' knows outcomes only in the sim suite with sim executors, or on "
                "a replayed pool (recorded outcomes)"
            )
        state.scratch["outcomes"] = outcomes
        return await SubtaskPolicy.act(self, state)

    def choose(self, state: EpisodeState, sub: Subtask) -> str:
        outcomes: OutcomeOracle | RecordedOutcomeOracle = state.scratch["outcomes"]
        options = estimates(state).options[sub.id]  # cheapest first
        for option in options:
            if outcomes.would_succeed(sub, option.executor):
                return option.executor
        return max(options, key=lambda o: o.success).executor


BASELINES: dict[str, Callable[[], SubtaskPolicy]] = {
    "strongest": StrongestPolicy,
    "cheapest": CheapestPolicy,
    "random": RandomPolicy,
    "greedy": GreedyPolicy,
    "oracle": OraclePolicy,
}
