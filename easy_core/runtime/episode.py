"""The milestone-plan-act loop: policy -> plan -> engine -> results -> policy, until a final
answer, the milestone limit, or a budget ends the episode. It never raises on bad policy output:
an invalid turn is repaired once (the policy sees the error), then ends the episode."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from easy_core.errors import EasyError, PlanError
from easy_core.executors.pool import ExecutorPool
from easy_core.graph import parse_plan, validate_plan
from easy_core.params import Params
from easy_core.policies.base import EpisodeState, Policy
from easy_core.rewards import reward
from easy_core.runtime.clock import Clock
from easy_core.runtime.engine import LocalEngine, PlanEngine
from easy_core.schemas import EndReason, Milestone, Plan, RunMetrics, Task, Trajectory

Checker = Callable[[Task, str | None], bool]


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
    ):
        self.pool = pool
        self.params = params
        self.check = check
        self.sequential = sequential
        self.engine: PlanEngine = engine or LocalEngine(
            step_timeout_s=params.runtime.step_timeout_s,
            step_timeout_factor=params.runtime.step_timeout_factor,
            max_parallel=1 if sequential else None,
            resilience=params.resilience,
            difficulty_slope=params.capability.difficulty_slope,
        )
        self._executor_names = set(pool.executors)

    def can_simulate(self) -> bool:
        """Whether every executor can `simulate()`, so episodes can run on a
        `DiscreteEventClock` without an event loop."""
        return all(hasattr(e, "simulate") for e in self.pool.executors.values())

    async def run(
        self, task: Task, policy: Policy, seed: int = 0, clock: Clock | None = None
    ) -> Trajectory:
        """One episode. `clock` defaults to the running asyncio loop."""
        loop = clock if clock is not None else asyncio.get_running_loop()
        origin = loop.time()
        deadline = origin + task.budget_s
        session = self.pool.session(task.budget_usd)
        state = EpisodeState(task, self.pool, self.params, seed, session.ledger)
        subtask_ids = task.subtask_index if task.subtasks else None
        repairs = 0
        final: str | None = None
        end_reason: EndReason | None = None
        end_detail = ""
        while end_reason is None:
            state.elapsed_s = loop.time() - origin
            if loop.time() >= deadline:
                end_reason, end_detail = "time_budget", "time budget reached before the next turn"
                break
            try:
                turn = await policy.act(state)
                plan = turn if isinstance(turn, Plan) else parse_plan(turn)
                validate_plan(
                    plan,
                    self._executor_names,
                    max_steps=self.params.limits.max_steps_per_plan,
                    prior_step_ids=state.results,
                    subtask_ids=subtask_ids,
                )
            except PlanError as exc:
                if repairs < self.params.runtime.repair_turns:
                    repairs += 1
                    state.repair_error = str(exc)
                    continue
                end_reason, end_detail = "invalid_plan", str(exc)
                break
            except Exception as exc:  # a policy's own failure ends the episode, not the run
                kind = "" if isinstance(exc, EasyError) else f"{type(exc).__name__}: "
                end_reason, end_detail = "policy_error", f"{kind}{exc}"
                break
            state.repair_error = None
            if plan.final_answer is not None:
                final = plan.final_answer
                end_reason = "final_answer"
                break
            if not state.milestones_left:
                end_reason = "max_milestones"
                end_detail = (
                    f"no final answer after {self.params.runtime.max_milestones} milestones"
                )
                break
            started = loop.time() - origin
            outcome = await self.engine.execute(
                plan,
                session,
                task,
                seed=seed,
                prior=state.results,
                origin=origin,
                deadline=deadline,
                clock=loop,
            )
            state.milestones.append(
                Milestone(
                    index=len(state.milestones),
                    plan=plan,
                    results=outcome.results,
                    started_s=started,
                    finished_s=loop.time() - origin,
                    critical_path_s=outcome.critical_path_s,
                )
            )
            state.results.update((result.step_id, result) for result in outcome.results)
            if outcome.stop_reason is not None:
                end_reason, end_detail = outcome.stop_reason, outcome.stop_detail

        metrics = self._metrics(state, loop.time() - origin, session.ledger.spent_usd)
        correct = end_reason == "final_answer" and self.check(task, final)
        return Trajectory(
            task_id=task.id,
            suite=task.suite,
            policy=policy.name,
            pool=self.pool.name,
            seed=seed,
            sequential=self.sequential,
            milestones=state.milestones,
            final_answer=final,
            correct=correct,
            end_reason=end_reason,
            end_detail=end_detail,
            budget_usd=task.budget_usd,
            budget_s=task.budget_s,
            metrics=metrics,
            reward=reward(
                correct,
                metrics,
                budget_usd=task.budget_usd,
                budget_s=task.budget_s,
                terminated=end_reason == "final_answer",
                repairs=repairs,
                params=self.params.reward,
            ),
        )

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
