"""Valid-plan rate of an LLM orchestrator: its first turn on held-out sim tasks, parsed and
validated as the runtime would (no repair turn), with the generated tokens and time."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from easy_core.core.errors import PlanError
from easy_core.core.params import Params
from easy_core.core.stats import wilson_interval
from easy_core.executors.pool import load_pool
from easy_core.plans.prompting import orchestrator_messages
from easy_core.plans.structured import turn_schema
from easy_core.plans.validation import parse_plan, validate_plan
from easy_core.policies.levels import resolve_levels
from easy_core.policies.llm import executor_slot, generate_hf, generate_openai
from easy_core.world.suites.sim import SimSuite


def valid_plan_rate(
    params: Params, pool_path: str, n: int, seed: int = 0, split: str = "test"
) -> dict[str, Any]:
    settings = params.orchestrator
    pool = load_pool(pool_path, params)
    names = set(executor_slot(settings, list(pool.executors)))
    errors: Counter[str] = Counter()
    valid = tokens = 0
    started = time.perf_counter()
    for task in SimSuite(params.sim).tasks(split, n, seed):
        messages = orchestrator_messages(params, task, pool.profiles, [])
        schema = turn_schema(
            task, list(names), [], params.limits.max_steps_per_plan, settings.executor_last
        )
        if settings.backend == "hf":
            text, used = generate_hf(messages, settings, f"{seed}|{task.id}", schema)
        else:
            text, used = generate_openai(messages, settings, schema)
        tokens += used
        try:
            plan = parse_plan(text)
            validate_plan(
                plan,
                names,
                max_steps=params.limits.max_steps_per_plan,
                subtask_ids=task.subtask_index,
            )
            if settings.executor_levels:  # as the runtime reads them: each on one subtask
                resolve_levels(plan, task, pool.profiles, params.capability.difficulty_slope)
            valid += 1
        except PlanError as exc:
            errors[str(exc).split(":")[0][:60]] += 1
    return {
        "model": settings.model,
        "backend": settings.backend,
        "structured": settings.structured,
        "tasks": n,
        "valid": valid,
        "valid_rate": valid / n if n else 0.0,
        "valid_rate_95ci": wilson_interval(valid, n),
        "mean_tokens": tokens / n if n else 0.0,
        "seconds_per_plan": (time.perf_counter() - started) / n if n else 0.0,
        "errors": dict(errors.most_common(5)),
    }
