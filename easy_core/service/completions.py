"""One chat completion: the conversation's last user message becomes a task of the serving
suite, a policy runs the milestone-plan-act loop on it over the pool's shared dispatcher, and
the trajectory becomes an OpenAI chat completion with an `easy` report. Requests are checked
here against the server's caps, each refusal a `RequestError` naming its field."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from easy_core.core.errors import ConfigError
from easy_core.core.params import PRIVILEGED_POLICIES, Params
from easy_core.core.schemas import Plan, StepResult, Task, Trajectory
from easy_core.executors.pool import ExecutorPool, load_pool
from easy_core.plans.validation import parse_plan
from easy_core.policies import get_policy
from easy_core.runtime.dispatcher import Dispatcher, Embed, make_rule
from easy_core.runtime.episode import EpisodeRunner
from easy_core.runtime.policy import EpisodeState, Policy
from easy_core.service.protocol import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionRequest,
    Choice,
    EasyReport,
    MilestoneReport,
    StepReport,
    Usage,
)
from easy_core.world.suites import get_suite

DEADLINE_GRACE_S = 5.0
Event = dict[str, Any]
EventSink = Callable[[Event], None]


class RequestError(Exception):
    """A request the server refuses: an HTTP status and an OpenAI-style error."""

    def __init__(
        self, status: int, message: str, param: str | None = None, code: str | None = None
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code

    @property
    def kind(self) -> str:
        return {
            401: "authentication_error",
            404: "not_found_error",
            413: "invalid_request_error",
            429: "rate_limit_error",
        }.get(self.status, "invalid_request_error")


class _Announcing:
    """A served policy that also reports each milestone's plan as it is decided (streaming)."""

    def __init__(self, inner: Policy, sink: EventSink):
        self.inner = inner
        self.name = inner.name
        self.sink = sink

    async def act(self, state: EpisodeState) -> Plan:
        turn = await self.inner.act(state)
        plan = turn if isinstance(turn, Plan) else parse_plan(turn)
        if plan.final_answer is None:
            self.sink({"event": "milestone", "index": len(state.milestones), **_plan(plan)})
        return plan


def _plan(plan: Plan) -> dict[str, Any]:
    return {
        "milestone": plan.milestone,
        "steps": [
            {"id": s.id, "executor": s.executor, "depends_on": s.depends_on} for s in plan.steps
        ],
    }


def _step_event(result: StepResult) -> Event:
    return {
        "event": "step",
        "id": result.step_id,
        "executor": result.executor,
        "status": result.status,
        "tokens_in": result.tokens_in,
        "tokens_out": result.tokens_out,
        "latency_s": result.latency_s,
        "cost_usd": result.cost_usd,
    }


class CompletionService:
    """The pool, its shared dispatcher and the served policies; `complete` runs one request."""

    def __init__(
        self,
        pool: ExecutorPool,
        params: Params,
        policy: str | None = None,
        embed: Embed | None = None,
    ):
        serve = params.serve
        names = list(dict.fromkeys([policy, *serve.policies] if policy else serve.policies))
        privileged = sorted(set(names) & PRIVILEGED_POLICIES)
        if privileged:
            raise ConfigError(
                f"policy {privileged[0]!r} reads the simulated outcomes and is never served; "
                "serve a policy that sees only what a real deployment sees"
            )
        self.params = params
        self.pool = pool
        self.policies: dict[str, Policy] = {}
        for name in names:
            instance = get_policy(name)
            prepare = getattr(instance, "prepare", None)
            if prepare is not None:
                prepare(params)  # a learned policy fails here on a missing model, not per request
            self.policies[name] = instance
        self.default_policy = names[0]
        self.suite = get_suite(serve.suite, params)
        if not hasattr(self.suite, "from_question"):
            raise ConfigError(
                f"suite {serve.suite!r} cannot turn a message into a task; serve.suite must be "
                "one of sim, math, research"
            )
        # The service does not judge answers: no gold reaches a request's trajectory.
        self.runner = EpisodeRunner(pool, params, lambda task, answer: False)
        self.rule = make_rule(serve.release, serve, params.release, embed)
        warm_up = getattr(self.rule, "warm_up", None)
        if warm_up is not None:
            warm_up()  # coact's encoder loads before the first request, not during one
        self.dispatcher = Dispatcher(pool, self.rule)
        self.created = int(time.time())
        self.in_flight = 0

    @classmethod
    def from_pool_file(
        cls, pool_path: str | Path, params: Params, policy: str | None = None
    ) -> CompletionService:
        return cls(load_pool(pool_path, params), params, policy)

    # ------------------------------------------------------------------ checking a request

    def task_of(self, request: ChatCompletionRequest) -> tuple[str, Task]:
        """The policy and the task a request asks for, or a `RequestError` naming the field."""
        serve = self.params.serve
        if request.model not in self.policies:
            raise RequestError(
                404,
                f"model {request.model!r} is not served here; available: "
                f"{', '.join(self.policies)}",
                "model",
                "model_not_found",
            )
        if not request.messages:
            raise RequestError(400, "messages is empty: send at least one user message", "messages")
        if len(request.messages) > serve.max_messages:
            raise RequestError(
                400,
                f"messages has {len(request.messages)} entries; this server takes at most "
                f"{serve.max_messages}",
                "messages",
            )
        for i, message in enumerate(request.messages):
            if len(message.content) > serve.max_message_chars:
                raise RequestError(
                    400,
                    f"messages[{i}].content has {len(message.content)} characters; this server "
                    f"takes at most {serve.max_message_chars}",
                    f"messages[{i}].content",
                    "message_too_long",
                )
        users = [m.content for m in request.messages if m.role == "user" and m.content.strip()]
        if not users:
            raise RequestError(
                400, "messages has no non-empty user message: the task is the last one", "messages"
            )
        task = self.suite.from_question(users[-1])  # type: ignore[attr-defined]
        budget_usd = self._limit(request.max_cost_usd, serve.max_cost_usd, "max_cost_usd", "$")
        budget_s = self._limit(request.max_seconds, serve.max_seconds, "max_seconds", "")
        task = task.model_copy(
            update={
                "budget_usd": budget_usd
                if budget_usd is not None
                else min(task.budget_usd, serve.max_cost_usd),
                "budget_s": budget_s
                if budget_s is not None
                else min(task.budget_s, serve.max_seconds),
            }
        )
        return request.model, task

    @staticmethod
    def _limit(asked: float | None, cap: float, field: str, unit: str) -> float | None:
        if asked is not None and asked > cap:
            raise RequestError(
                400,
                f"{field} {unit}{asked:g} is above this server's cap of {unit}{cap:g}; ask for "
                "at most the cap",
                field,
                "budget_above_cap",
            )
        return asked

    # ------------------------------------------------------------------ running it

    async def complete(
        self,
        request: ChatCompletionRequest,
        sink: EventSink | None = None,
        resolved: tuple[str, Task] | None = None,
    ) -> ChatCompletion:
        """Run one request to its chat completion; `sink` receives milestone and step events
        as they happen (streaming); `resolved`: its `task_of`, when the caller checked it
        already."""
        name, task = resolved or self.task_of(request)
        if self.in_flight >= self.params.serve.max_in_flight:
            raise RequestError(
                429,
                f"this server is running {self.in_flight} requests, its limit; retry later",
                code="server_busy",
            )
        self.in_flight += 1
        started = time.monotonic()
        try:
            policy: Policy = self.policies[name]
            if sink is not None:
                policy = _Announcing(policy, sink)  # type: ignore[assignment]
            session = self.pool.session(
                task.budget_usd,
                shared=self.dispatcher,
                on_result=(lambda r: sink(_step_event(r))) if sink is not None else None,
            )
            # The engine stops at the time budget; this bounds a policy that does not return.
            try:
                async with asyncio.timeout(task.budget_s + DEADLINE_GRACE_S):
                    trajectory = await self.runner.run(
                        task, policy, request.seed or 0, session=session
                    )
            except TimeoutError:
                raise RequestError(
                    504,
                    f"the request ran past its time budget of {task.budget_s:g} s",
                    "max_seconds",
                    "deadline_exceeded",
                ) from None
            self.dispatcher.episode_finished(trajectory.metrics.makespan_s)
            by_executor: dict[str, float] = defaultdict(float)
            for entry in session.ledger.entries:
                by_executor[entry.executor] += entry.cost_usd
        finally:
            self.in_flight -= 1
        return completion(trajectory, dict(by_executor), time.monotonic() - started)


def completion(
    trajectory: Trajectory, cost_by_executor: dict[str, float], server_s: float
) -> ChatCompletion:
    metrics = trajectory.metrics
    completion_tokens = metrics.tokens_out + metrics.orchestrator_tokens
    answered = trajectory.final_answer is not None
    return ChatCompletion(
        id=f"chatcmpl-{uuid.uuid4().hex}",
        created=int(time.time()),
        model=trajectory.policy,
        choices=[
            Choice(
                message=AssistantMessage(content=trajectory.final_answer or ""),
                finish_reason="stop" if answered else "length",
            )
        ],
        usage=Usage(
            prompt_tokens=metrics.tokens_in,
            completion_tokens=completion_tokens,
            total_tokens=metrics.tokens_in + completion_tokens,
        ),
        easy=EasyReport(
            policy=trajectory.policy,
            pool=trajectory.pool,
            task_id=trajectory.task_id,
            end_reason=trajectory.end_reason,
            end_detail=trajectory.end_detail,
            cost_usd=metrics.cost_usd,
            cost_by_executor=cost_by_executor,
            budget_usd=trajectory.budget_usd,
            budget_s=trajectory.budget_s,
            makespan_s=metrics.makespan_s,
            server_s=server_s,
            milestones=[
                MilestoneReport(
                    index=m.index,
                    milestone=m.plan.milestone,
                    started_s=m.started_s,
                    finished_s=m.finished_s,
                    steps=[
                        StepReport(
                            id=step.id,
                            executor=result.executor,
                            depends_on=step.depends_on,
                            status=result.status,
                            tokens_in=result.tokens_in,
                            tokens_out=result.tokens_out,
                            latency_s=result.latency_s,
                            cost_usd=result.cost_usd,
                            attempts=result.attempts,
                            error=result.error,
                        )
                        for step, result in zip(m.plan.steps, m.results, strict=True)
                    ],
                )
                for m in trajectory.milestones
            ],
        ),
    )
