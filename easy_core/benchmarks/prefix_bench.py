"""Benchmark of prefix-aware ordering against FIFO on a shared executor (`easy bench prefix`),
and its markdown table.
"""

from __future__ import annotations

import heapq

from easy_core.core.params import Params, PrefixParams
from easy_core.core.schemas import ExecutorProfile, Task, approx_tokens
from easy_core.executors.pool import CostLedger, ExecutorPool
from easy_core.policies.baselines import GreedyPolicy
from easy_core.runtime.policy import EpisodeState, PoolView, public_task
from easy_core.runtime.prefix_order import PrefixCache, QueuedStep, next_step


def prefix_benchmark(
    params: Params, pool: ExecutorPool, tasks: list[Task], prefix: PrefixParams, order: str
) -> dict[str, float]:
    """Run the workflows with `order` ("fifo" or "prefix"); hit rate, prefill tokens and time,
    input cost and mean workflow flow time."""
    profiles = {p.name: p for p in pool.profiles}
    greedy = GreedyPolicy()
    plans = []
    for task in tasks:
        state = EpisodeState(
            public_task(task), PoolView.of(pool), params, 0, CostLedger(task.budget_usd)
        )
        plans.append({sub.id: greedy.choose(state, sub) for sub in task.subtasks})
    caches = {name: PrefixCache(prefix.cache_tokens) for name in profiles}
    lanes = {name: profiles[name].max_concurrency for name in profiles}
    queues: dict[str, list[QueuedStep]] = {name: [] for name in profiles}
    events: list[tuple[float, int, int, str]] = []  # (time, seq, workflow, subtask) finishes
    seq = 0
    waiting: dict[int, dict[str, int]] = {}
    arrival: dict[int, float] = {}
    done_at: dict[int, float] = {}
    remaining: dict[int, int] = {}
    totals = {
        "steps": 0,
        "hits": 0,
        "prompt_tokens": 0,
        "cached_tokens": 0,
        "prefill_s": 0.0,
        "input_usd": 0.0,
    }
    next_workflow = 0

    def enqueue(w: int, sub_id: str, now: float) -> None:
        nonlocal seq
        task = tasks[w]
        sub = task.subtask(sub_id)
        seq += 1
        queues[plans[w][sub_id]].append(
            QueuedStep(
                now,
                seq,
                w,
                sub_id,
                task.id,
                prefix.system_tokens + approx_tokens(task.prompt),
                sub.input_tokens + sum(task.subtask(d).output_tokens for d in sub.depends_on),
                sub.output_tokens,
            )
        )

    def admit(now: float) -> None:
        nonlocal next_workflow
        while next_workflow < len(tasks) and len(remaining) < prefix.concurrent:
            w = next_workflow
            next_workflow += 1
            task = tasks[w]
            arrival[w] = now
            remaining[w] = len(task.subtasks)
            waiting[w] = {s.id: len(s.depends_on) for s in task.subtasks}
            for sub in task.subtasks:
                if not sub.depends_on:
                    enqueue(w, sub.id, now)

    def serve(now: float) -> None:
        nonlocal seq
        for name, queue in queues.items():
            while queue and lanes[name] > 0:
                step = queue.pop(next_step(queue, caches[name], order, prefix.max_bypass))
                lanes[name] -= 1
                profile: ExecutorProfile = profiles[name]
                hit = caches[name].touch(step.prefix, step.prefix_tokens)
                cached = step.prefix_tokens if hit else 0
                fresh = step.prefix_tokens + step.own_tokens - cached
                speed = profile.latency.prefill_tokens_per_s
                prefill = fresh / speed + cached / (speed * prefix.cached_speedup)
                totals["steps"] += 1
                totals["hits"] += hit
                totals["prompt_tokens"] += step.prefix_tokens + step.own_tokens
                totals["cached_tokens"] += cached
                totals["prefill_s"] += prefill
                totals["input_usd"] += (
                    (fresh + cached * prefix.cached_price) * profile.price_in_per_1m / 1e6
                )
                duration = (
                    profile.latency.ttft_s
                    + prefill
                    + step.out_tokens / profile.latency.tokens_per_s
                )
                seq += 1
                heapq.heappush(events, (now + duration, seq, step.workflow, step.sub_id))

    now = 0.0
    admit(now)
    serve(now)
    while events:
        now, _, w, sub_id = heapq.heappop(events)
        lanes[plans[w][sub_id]] += 1
        remaining[w] -= 1
        for sub in tasks[w].subtasks:
            if sub_id in sub.depends_on:
                waiting[w][sub.id] -= 1
                if waiting[w][sub.id] == 0:
                    enqueue(w, sub.id, now)
        if remaining[w] == 0:
            done_at[w] = now
            del remaining[w]
            admit(now)
        serve(now)
    flow = [done_at[w] - arrival[w] for w in done_at]
    return {
        "order": order,
        "workflows": float(len(flow)),
        "hit_rate": totals["hits"] / max(1, totals["steps"]),
        "cached_token_share": totals["cached_tokens"] / max(1, totals["prompt_tokens"]),
        "prefill_s": totals["prefill_s"],
        "input_usd": totals["input_usd"],
        "mean_flow_s": sum(flow) / max(1, len(flow)),
        "makespan_s": now,
    }


def prefix_markdown(rows: list[dict[str, float]]) -> str:
    base = rows[0]
    lines = [
        "| order | prefix hit rate | cached share of prompt tokens | prefill time s | "
        "input cost $ | mean flow time s | all done at s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['order']} | {r['hit_rate']:.3f} | {r['cached_token_share']:.3f} | "
            f"{r['prefill_s']:.1f} ({r['prefill_s'] / base['prefill_s'] - 1:+.1%}) | "
            f"{r['input_usd']:.4f} ({r['input_usd'] / base['input_usd'] - 1:+.1%}) | "
            f"{r['mean_flow_s']:.2f} | {r['makespan_s']:.1f} |"
        )
    return "\n".join(lines) + "\n"
