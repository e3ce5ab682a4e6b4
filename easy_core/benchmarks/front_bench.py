"""The front's own time per request, in process (`easy bench front`): the FastAPI app of
`easy serve` driven through httpx's ASGI transport on a virtual-time loop, over a sim pool, one
request at a time. The episode's steps then take no wall time, so what a request costs in real
time outside its episode is the front's own work: parsing and checking the body, turning the
question into a task, the report, serialising, and the middleware around it.

Per request: `server` is the `x-easy-server-ms` header (the server's time from arrival to the
response's start) less the real time spent inside the episode; `client` adds httpx and the ASGI
transport. Unlike `easy bench serve` this has no sockets and no other requests on the loop: it
isolates the code's cost from the machine's load, so two commits compare in one run."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from easy_core.benchmarks.serve_bench import questions
from easy_core.core.clock import VirtualTimeLoop
from easy_core.core.params import Params
from easy_core.core.stats import quantile
from easy_core.service.app import create_app
from easy_core.service.completions import CompletionService

WARM_UP = 5  # first requests pay imports and caches


@dataclass(frozen=True)
class FrontFigures:
    suite: str
    policy: str
    n: int
    steps_per_request: float
    server_p50_ms: float
    server_p95_ms: float
    client_p50_ms: float


def front_benchmark(
    pool: str | Path,
    params: Params,
    suite: str = "math-compound",
    policy: str = "greedy",
    n: int = 40,
    seed: int = 0,
) -> FrontFigures:
    """`n` requests of `suite`'s test questions (after a few to warm up), asked of `policy`."""
    serving = params.model_copy(
        update={
            "serve": params.serve.model_copy(update={"suite": suite, "policies": [policy]}),
        }
    )
    service = CompletionService.from_pool_file(pool, serving)
    asked = questions(suite, n + WARM_UP, seed)  # what `easy bench serve` sends
    inside: list[float] = []
    run_episode = service.runner.run

    async def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await run_episode(*args, **kwargs)
        finally:
            inside.append(time.perf_counter() - started)

    service.runner.run = timed  # type: ignore[method-assign]

    async def drive() -> tuple[list[float], list[float], list[int]]:
        transport = httpx.ASGITransport(app=create_app(service, None))
        server, client, steps = [], [], []
        async with httpx.AsyncClient(transport=transport, base_url="http://front") as http:
            for question in asked:
                started = time.perf_counter()
                response = await http.post(
                    "/v1/chat/completions",
                    json={"model": policy, "messages": [{"role": "user", "content": question}]},
                )
                total = time.perf_counter() - started
                response.raise_for_status()
                report = response.json()["easy"]
                server.append(float(response.headers["x-easy-server-ms"]) - 1000 * inside[-1])
                client.append(1000 * (total - inside[-1]))
                steps.append(sum(len(m["steps"]) for m in report["milestones"]))
        return server[WARM_UP:], client[WARM_UP:], steps[WARM_UP:]

    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        server, client, steps = runner.run(drive())
    return FrontFigures(
        suite=suite,
        policy=policy,
        n=len(server),
        steps_per_request=sum(steps) / len(steps),
        server_p50_ms=quantile(server, 0.5),
        server_p95_ms=quantile(server, 0.95),
        client_p50_ms=quantile(client, 0.5),
    )
