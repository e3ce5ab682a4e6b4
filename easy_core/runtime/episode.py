"""The milestone-plan-act loop: policy -> plan -> engine -> results -> policy, until a final
answer, the milestone limit, or a budget ends the episode. It never raises on bad policy output:
an invalid turn is repaired once (the policy sees the error), then ends the episode."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from easy_core.core.clock import Clock, DiscreteEventClock
from easy_core.core.errors import EasyError, PlanError
from easy_core.core.params import Params
from easy_core.core.reward import reward
from easy_core.core.schemas import (
    EndReason,
    Milestone,
    Plan,
    RunMetrics,
    StepResult,
    Task,
    Trajectory,
    approx_tokens,
)
from easy_core.executors.pool import ExecutorPool, PoolSession
from easy_core.executors.replay import ReplayExecutor
from easy_core.executors.simulated import SimExecutor
from easy_core.plans.prompting import plan_text
from easy_core.plans.validation import answer_reference, parse_plan, validate_plan
from easy_core.runtime.local_engine import LocalEngine
from easy_core.runtime.policy import (
    EpisodeState,
    OutcomeOracle,
    Policy,
    PoolView,
    RecordedOutcomeOracle,
    public_task,
)
from easy_core.runtime.scheduler import PlanEngine

Checker = Callable[[Task, str | None], bool]
Scorer = Callable[[Task, str | None], dict[str, float]]


class EpisodeRunner:
    """Runs episodes of one policy on one pool."""

    def __init__(
        self,
        pool: ExecutorPool,
        params: Params,
        check: Checker,
        *,
        sequential: bool = False,
        engine: PlanEngine | None = None,
        score: Scorer | None = None,
    ):
        self.pool = pool
        self.params = params
        self.check = check
        self.score = score
        self.sequential = sequential
        self.engine: PlanEngine = engine or LocalEngine(
            step_timeout_s=params.runtime.step_timeout_s,
            step_timeout_factor=params.runtime.step_timeout_factor,
            max_parallel=1 if sequential else None,
            resilience=params.resilience,
            difficulty_slope=params.capability.difficulty_slope,
        )
        self._executor_names = set(pool.executors)
        self._view = PoolView.of(pool)  # what policies see of the pool
        # What the oracle may ask, once per pool: the simulated world, where every executor is
        # simulated (a fault-injecting wrapper keeps the one it wraps as `inner`), else None.
        inner = [getattr(e, "inner", e) for e in pool.executors.values()]
        simulated = bool(inner) and all(isinstance(e, SimExecutor) for e in inner)
        self._world = inner[0].world if simulated else None  # type: ignore[attr-defined]
        # or the recording, where every executor replays one or is a tool the replay pool keeps
        # live (the game): its rows are in the same recording, read through a replayed one
        replays = [e for e in inner if isinstance(e, ReplayExecutor)]
        replayed = bool(replays) and all(
            isinstance(e, ReplayExecutor) or e.profile.backend == "tool"  # type: ignore[attr-defined]
            for e in inner
        )
        self._replays = (
            {
                name: e if isinstance(e, ReplayExecutor) else replays[0]
                for name, e in zip(pool.executors, inner, strict=True)
            }
            if replayed
            else None
        )
        self._profiles = {  # the world's own profiles (a card may be a measurement of them)
            name: getattr(getattr(e, "inner", e), "truth", e.profile)
            for name, e in pool.executors.items()
        }
        # Charge policies that are not LLMs the tokens of their plans as an LLM would write
        # them (tree-rollout accounting); off by default, it costs a serialisation per turn.
        self.count_plan_tokens = False

    def needs_wall_clock(self) -> bool:
        """Whether an executor waits on real work (threads, sockets), which a virtual clock
        would skip past: every step would hit its timeout at once."""
        return any(
            getattr(getattr(e, "inner", e), "wall_clock", False)
            for e in self.pool.executors.values()
        )

    def can_simulate(self) -> bool:
        """Whether every executor can `simulate()`, so episodes can run on a
        `DiscreteEventClock` without an event loop."""
        return all(hasattr(e, "simulate") for e in self.pool.executors.values())

    def start(
        self,
        task: Task,
        seed: int = 0,
        clock: Clock | None = None,
        session: PoolSession | None = None,
    ) -> EpisodeCursor:
        """A new episode, before its first turn. `clock` defaults to the running asyncio loop;
        `session` to one of its own (the service passes one on its shared dispatcher)."""
        loop = clock if clock is not None else asyncio.get_running_loop()
        session = session or self.pool.session(task.budget_usd)
        origin = loop.time()
        if session.arrival_s is None:
            session.arrival_s = origin
        return EpisodeCursor(
            runner=self,
            task=task,
            seed=seed,
            clock=loop,
            origin=origin,
            deadline=origin + task.budget_s,
            session=session,
            state=EpisodeState(public_task(task), self._view, self.params, seed, session.ledger),
        )

    async def run(
        self,
        task: Task,
        policy: Policy,
        seed: int = 0,
        clock: Clock | None = None,
        session: PoolSession | None = None,
    ) -> Trajectory:
        """One episode. `clock` defaults to the running asyncio loop."""
        cursor = self.start(task, seed, clock, session)
        while await cursor.turn(policy):
            pass
        return cursor.trajectory(policy.name)

    @staticmethod
    def _metrics(state: EpisodeState, makespan_s: float, spent_usd: float) -> RunMetrics:
        tokens_in = tokens_out = steps = failed = skipped = faults = retries = fallbacks = 0
        critical = 0.0
        for milestone in state.milestones:
            critical += milestone.critical_path_s
            for step, r in zip(milestone.plan.steps, milestone.results, strict=True):
                steps += 1
                tokens_in += r.tokens_in
                tokens_out += r.tokens_out
                failed += r.status == "failed"
                skipped += r.status == "skipped"
                faults += len(r.faults)
                retries += r.attempts - 1
                fallbacks += r.executor != step.executor
        return RunMetrics(
            cost_usd=spent_usd,
            makespan_s=makespan_s,
            critical_path_s=critical,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            n_milestones=len(state.milestones),
            n_steps=steps,
            n_failed=failed,
            n_skipped=skipped,
            n_faults=faults,
            n_retries=retries,
            n_fallbacks=fallbacks,
            orchestrator_tokens=state.scratch.get("orchestrator_tokens", 0),
        )


@dataclass
class EpisodeCursor:
    """An episode between turns: `turn` runs one orchestrator turn and, if it is a plan, the
    plan; `fork` copies the episode at this point (results, spend, clock, breakers) so that
    alternatives can continue from a shared prefix (tree rollouts; discrete-event clock only)."""

    runner: EpisodeRunner
    task: Task
    seed: int
    clock: Clock
    origin: float
    deadline: float
    session: PoolSession
    state: EpisodeState
    repairs: int = 0
    final: str | None = None
    end_reason: EndReason | None = None
    end_detail: str = ""
    turn_tokens: list[int] = field(default_factory=list)  # orchestrator tokens of each turn

    @property
    def ended(self) -> bool:
        return self.end_reason is not None

    def _outcomes(self) -> OutcomeOracle | RecordedOutcomeOracle | None:
        """The outcome oracle of this episode, for a privileged policy: only where every
        executor is simulated and the task is a sim task, or every executor replays a
        recording (elsewhere outcomes are unknown)."""
        runner = self.runner
        if runner._replays is not None:
            return RecordedOutcomeOracle(self.task, runner._replays)  # type: ignore[arg-type]
        if self.task.suite != "sim" or runner._world is None:
            return None
        return OutcomeOracle(runner._world, self.seed, self.task, runner._profiles)

    async def turn(self, policy: Policy) -> bool:
        """One turn; False once the episode has ended."""
        if self.end_reason is not None:
            return False
        runner, state, clock = self.runner, self.state, self.clock
        state.elapsed_s = clock.time() - self.origin
        if clock.time() >= self.deadline:
            self.end_reason = "time_budget"
            self.end_detail = "time budget reached before the next turn"
            return False
        before = state.scratch.get("orchestrator_tokens", 0)
        try:
            if getattr(policy, "privileged", False) is True:
                turn = await policy.act_with_outcomes(state, self._outcomes())  # type: ignore[attr-defined]
            else:
                turn = await policy.act(state)
            plan = turn if isinstance(turn, Plan) else parse_plan(turn)
            self._count_tokens(before, plan)
            validate_plan(
                plan,
                runner._executor_names,
                max_steps=runner.params.limits.max_steps_per_plan,
                prior_step_ids=state.results,
                subtask_ids=self.task.subtask_index if self.task.subtasks else None,
            )
        except PlanError as exc:
            self._count_tokens(before, None)
            if self.repairs < runner.params.runtime.repair_turns:
                self.repairs += 1
                state.repair_error = str(exc)
                return True
            self.end_reason, self.end_detail = "invalid_plan", str(exc)
            return False
        except Exception as exc:  # a policy's own failure ends the episode, not the run
            kind = "" if isinstance(exc, EasyError) else f"{type(exc).__name__}: "
            self.end_reason, self.end_detail = "policy_error", f"{kind}{exc}"
            return False
        state.repair_error = None
        if plan.final_answer is not None:
            self.final = _answer(plan.final_answer, self.task, state.results)
            self.end_reason = "final_answer"
            return False
        if not state.milestones_left:
            self.end_reason = "max_milestones"
            self.end_detail = (
                f"no final answer after {runner.params.runtime.max_milestones} milestones"
            )
            return False
        started = clock.time() - self.origin
        outcome = await runner.engine.execute(
            plan,
            self.session,
            self.task,
            seed=self.seed,
            prior=state.results,
            origin=self.origin,
            deadline=self.deadline,
            clock=clock,
        )
        state.milestones.append(
            Milestone(
                index=len(state.milestones),
                plan=plan,
                results=outcome.results,
                started_s=started,
                finished_s=clock.time() - self.origin,
                critical_path_s=outcome.critical_path_s,
            )
        )
        state.results.update((result.step_id, result) for result in outcome.results)
        if outcome.stop_reason is not None:
            self.end_reason, self.end_detail = outcome.stop_reason, outcome.stop_detail
            return False
        return True

    def _count_tokens(self, before: int, plan: Plan | None) -> None:
        """Tokens the orchestrator generated this turn: what an LLM policy reports, else the
        length of the plan as an LLM would write it (so token counts compare across policies)."""
        after = self.state.scratch.get("orchestrator_tokens", 0)
        if after == before and plan is not None and self.runner.count_plan_tokens:
            after = before + approx_tokens(plan_text(plan))
            self.state.scratch["orchestrator_tokens"] = after
        self.turn_tokens.append(after - before)

    def fork(self) -> EpisodeCursor:
        """An independent copy of the episode at this point (discrete-event clock only)."""
        if not isinstance(self.clock, DiscreteEventClock):
            raise TypeError("only an episode on a DiscreteEventClock can be forked")
        clock = DiscreteEventClock()
        clock.now = self.clock.now
        ledger = copy.copy(self.session.ledger)
        ledger.entries = list(ledger.entries)
        session = self.runner.pool.session(self.task.budget_usd)
        session.ledger = ledger
        session._breakers = copy.deepcopy(self.session._breakers)
        state = copy.copy(self.state)
        state.ledger = ledger
        state.milestones = list(state.milestones)
        state.results = dict(state.results)
        state.scratch = dict(state.scratch)
        return dataclasses.replace(
            self, clock=clock, session=session, state=state, turn_tokens=list(self.turn_tokens)
        )

    def trajectory(self, policy_name: str) -> Trajectory:
        runner, state, task = self.runner, self.state, self.task
        end_reason = self.end_reason or "max_milestones"
        metrics = runner._metrics(
            state, self.clock.time() - self.origin, self.session.ledger.spent_usd
        )
        correct = end_reason == "final_answer" and runner.check(task, self.final)
        return Trajectory(
            task_id=task.id,
            suite=task.suite,
            policy=policy_name,
            pool=runner.pool.name,
            seed=self.seed,
            sequential=runner.sequential,
            milestones=state.milestones,
            final_answer=self.final,
            correct=correct,
            scores=runner.score(task, self.final) if runner.score is not None else {},
            end_reason=end_reason,
            end_detail=self.end_detail,
            budget_usd=task.budget_usd,
            budget_s=task.budget_s,
            metrics=metrics,
            reward=reward(
                correct,
                metrics,
                budget_usd=task.budget_usd,
                budget_s=task.budget_s,
                terminated=end_reason == "final_answer",
                repairs=self.repairs,
                params=runner.params.reward,
            ),
        )


def _answer(final_answer: str, task: Task, results: dict[str, StepResult]) -> str:
    """The episode's answer: as written, or the result of the step it cites (`{m2-t6}`), which
    for a task with subtasks is that step's answer to the final subtask."""
    cited = answer_reference(final_answer)
    if cited is None or cited not in results:
        return final_answer
    result = results[cited]
    if task.subtasks and task.sink.id in result.sub_answers:
        return result.sub_answers[task.sink.id]
    return result.output
