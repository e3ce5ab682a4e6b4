"""The running service under load (`easy bench serve`): `easy serve` started on loopback for
each release rule, Poisson arrivals of distinct sim test tasks sent with the official `openai`
async client, bounded in count and time, at a light and a heavy load.

Per run: requests completed and refused, errors (anything but a completion), throughput, P50
and P95 request latency at the client, the front's own time per request (the server's time from
a request's arrival to its response, parsing, checks, task building and serialising included,
less the episode's makespan; and the client's latency less the makespan, which adds the
client library, HTTP and the loopback both ways; P50s), and
the most any request spent as a share of its budget (it must never pass 1). Errors are counted
by kind (exception class and HTTP status), so a failed request says why.

On llama.cpp servers (`server_logs`: the logs `infra/local/ladder-up.sh` writes), the
prefix-cache hit rate of each run comes from the servers' own lines: llama-cpp-python prints
`N prefix-match hit, remaining M prompt tokens to eval` when a prompt reuses the KV state of the
one before it, and `prompt eval time = ... / M tokens` for what it evaluated; the hit rate is
the reused prompt tokens over all prompt tokens of the run."""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from easy_core.core.errors import ConfigError
from easy_core.core.stats import quantile
from easy_core.world.suites.sim import generate_task


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`easy serve` in its own process on a loopback port, as a user starts it; `stop` sends
    SIGTERM (the graceful drain) and waits for the exit code."""

    def __init__(
        self,
        pool: str | Path,
        overrides: Sequence[str] = (),
        keys: Sequence[str] | None = None,
        policy: str | None = None,
        params: str | Path | None = None,
    ):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "easy_core.cli"]
        for assignment in overrides:
            command += ["--set", assignment]
        command += ["serve", "--pool", str(pool), "--port", str(self.port)]
        if params is not None:
            command += ["--params", str(params)]
        if policy is not None:
            command += ["--policy", policy]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        if keys is None:
            command.append("--no-auth")
        else:
            env["EASY_API_KEYS"] = ",".join(keys)
        self.command = command
        # A file, not a pipe: a pipe nobody reads fills up and blocks the server.
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - lives with the process
        self.process = subprocess.Popen(
            command, env=env, stdout=self._log, stderr=subprocess.STDOUT, text=True
        )

    def wait_ready(self, timeout_s: float = 120.0) -> ServerProcess:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"easy serve exited with {self.process.returncode}: {self.output()}"
                )
            try:
                if httpx.get(f"{self.url}/health", timeout=1.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.kill()
        raise TimeoutError(f"easy serve did not answer on {self.url} within {timeout_s} s")

    def stop(self, timeout_s: float = 60.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def output(self) -> str:
        """What the server wrote to stdout and stderr so far."""
        self._log.flush()
        self._log.seek(0)
        return self._log.read()

    def __enter__(self) -> ServerProcess:
        return self.wait_ready()

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self.kill()


@dataclass
class LoadRow:
    release: str
    load: str
    rate_rps: float
    n: int
    completed: int
    errors: int
    throughput_rps: float
    p50_s: float
    p95_s: float
    front_p50_ms: float
    client_front_p50_ms: float
    max_spend_share: float
    wall_s: float
    error_kinds: str = ""
    prefix_hit_rate: float | None = None  # reused / all prompt tokens, from the servers' logs


_PREFIX_HIT = re.compile(r"(\d+) prefix-match hit, remaining (\d+) prompt tokens to eval")
_FULL_HIT = "full prompt already cached"
_PROMPT_EVAL = re.compile(r"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens")


def prefix_cache_tokens(log: str) -> tuple[int, int]:
    """(prompt tokens reused from the KV cache, prompt tokens evaluated) in llama-cpp-python
    server log text."""
    reused = sum(int(m.group(1)) for m in _PREFIX_HIT.finditer(log))
    evaluated = sum(int(m.group(1)) for m in _PROMPT_EVAL.finditer(log))
    return reused, evaluated


class ServerLogs:
    """What llama.cpp servers append to their logs between `mark` and `hit_rate`."""

    def __init__(self, paths: Sequence[Path]):
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise ConfigError(
                f"server log {missing[0]} does not exist: start the ladder with "
                "infra/local/ladder-up.sh (its logs are EASY_STATE_DIR/ladder-*/llama.log)"
            )
        self.paths = list(paths)
        self.offsets = {p: p.stat().st_size for p in self.paths}

    def mark(self) -> None:
        self.offsets = {p: p.stat().st_size for p in self.paths}

    def appended(self) -> str:
        parts = []
        for path, offset in self.offsets.items():
            with path.open("rb") as f:
                f.seek(offset)
                parts.append(f.read().decode("utf-8", "replace"))
        return "\n".join(parts)

    def hit_rate(self) -> float | None:
        reused, evaluated = prefix_cache_tokens(self.appended())
        return reused / (reused + evaluated) if reused + evaluated else None


def questions(suite: str, n: int, seed: int = 0) -> list[str]:
    """What the load sends: the rendered prompts of `n` sim test tasks (the server regenerates
    each from its id), or the questions of another suite's test tasks."""
    if suite == "sim":
        return [generate_task(seed, "test", i).prompt for i in range(n)]
    from easy_core.core.params import Params
    from easy_core.world.suites import get_suite

    source = get_suite(suite, Params())
    tasks = source.tasks("test", n, seed)
    as_asked = getattr(source, "question_of", None)  # a compound task: its parts as asked
    if as_asked is not None:
        return [as_asked(t) for t in tasks]
    return [str(t.metadata.get("question") or t.prompt) for t in tasks]


async def drive(
    url: str,
    model: str,
    rate_rps: float,
    n: int,
    seed: int = 0,
    max_cost_usd: float | None = None,
    time_limit_s: float = 120.0,
    api_key: str = "none",
    prompts: Sequence[str] | None = None,
) -> tuple[list[dict], Counter[str], float]:
    """Poisson arrivals of `n` requests at `rate_rps` (distinct sim test tasks unless `prompts`
    are given); each request's client latency and `easy` report. Returns (results, errors by
    kind, wall seconds)."""
    from openai import AsyncOpenAI

    # no request is cut short by the client before the run's own bound
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key=api_key, max_retries=0, timeout=time_limit_s)
    rng = random.Random(seed)
    results: list[dict] = []
    errors: Counter[str] = Counter()

    texts = list(prompts) if prompts is not None else questions("sim", n, seed)

    async def one(index: int) -> None:
        body = {} if max_cost_usd is None else {"max_cost_usd": max_cost_usd}
        started = time.monotonic()
        try:
            raw = await client.chat.completions.with_raw_response.create(
                model=model,
                messages=[{"role": "user", "content": texts[index % len(texts)]}],
                extra_body=body,
            )
            response = raw.parse()
        except Exception as exc:  # any refusal or fault counts as an error of the run
            status = getattr(exc, "status_code", None)
            errors[type(exc).__name__ + (f" {status}" if status else "")] += 1
            return
        report = (response.model_extra or {})["easy"]
        results.append(
            {
                "index": index,
                "latency_s": time.monotonic() - started,
                "answer": response.choices[0].message.content,
                "http_server_s": float(raw.headers["x-easy-server-ms"]) / 1000,
                **report,
            }
        )

    started = time.monotonic()
    pending = []
    at = 0.0
    async with asyncio.timeout(time_limit_s):
        for index in range(n):
            at += rng.expovariate(rate_rps)
            delay = started + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            pending.append(asyncio.create_task(one(index)))
        await asyncio.gather(*pending)
    await client.close()
    return results, errors, time.monotonic() - started


def load_row(
    release: str,
    load: str,
    rate: float,
    n: int,
    results: list[dict],
    errors: Counter[str],
    wall: float,
    prefix_hit_rate: float | None = None,
) -> LoadRow:
    latencies = [r["latency_s"] for r in results] or [float("nan")]
    front = [r["http_server_s"] - r["makespan_s"] for r in results] or [float("nan")]
    client_front = [r["latency_s"] - r["makespan_s"] for r in results] or [float("nan")]
    spend = [r["cost_usd"] / r["budget_usd"] for r in results if r["budget_usd"] > 0]
    return LoadRow(
        release=release,
        load=load,
        rate_rps=rate,
        n=n,
        completed=len(results),
        errors=sum(errors.values()),
        throughput_rps=len(results) / wall,
        p50_s=quantile(latencies, 0.5),
        p95_s=quantile(latencies, 0.95),
        front_p50_ms=1000 * quantile(front, 0.5),
        client_front_p50_ms=1000 * quantile(client_front, 0.5),
        max_spend_share=max(spend, default=0.0),
        wall_s=wall,
        error_kinds=", ".join(f"{kind} x{count}" for kind, count in sorted(errors.items())),
        prefix_hit_rate=prefix_hit_rate,
    )


def serve_benchmark(
    pool: str | Path,
    releases: Sequence[str],
    loads: Sequence[tuple[str, float]],
    n: int,
    time_scale: float,
    model: str = "greedy",
    seed: int = 0,
    params: str | Path | None = None,
    suite: str = "sim",
    time_limit_s: float = 600.0,
    extra_overrides: Sequence[str] = (),
    server_logs: Sequence[Path] = (),
) -> list[LoadRow]:
    """Every release rule at every load, each on a fresh server (same tasks, same arrivals)."""
    rows = []
    prompts = questions(suite, n, seed)
    logs = ServerLogs(server_logs) if server_logs else None
    for release in releases:
        overrides = [
            f"serve.release={release}",
            f"sim.time_scale={time_scale}",
            f"serve.suite={suite}",
            *extra_overrides,
        ]
        with ServerProcess(pool, overrides, policy=model, params=params) as server:
            for load, rate in loads:
                if logs is not None:
                    logs.mark()
                results, errors, wall = asyncio.run(
                    drive(server.url, model, rate, n, seed, None, time_limit_s, prompts=prompts)
                )
                hit_rate = logs.hit_rate() if logs is not None else None
                rows.append(load_row(release, load, rate, n, results, errors, wall, hit_rate))
    return rows


def serve_markdown(rows: Sequence[LoadRow]) -> str:
    logged = any(r.prefix_hit_rate is not None for r in rows)
    header = (
        "| release | load | rate req/s | n | completed | errors | throughput req/s | P50 s | "
        "P95 s | front P50 ms (server) | client - makespan P50 ms | max spend / budget |"
    )
    rule = "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    lines = [header + (" prefix-cache hit rate |" if logged else ""), rule + ("---:|" * logged)]
    for r in rows:
        line = (
            f"| {r.release} | {r.load} | {r.rate_rps:g} | {r.n} | {r.completed} | {r.errors} | "
            f"{r.throughput_rps:.3g} | {r.p50_s:.3f} | {r.p95_s:.3f} | {r.front_p50_ms:.2f} | "
            f"{r.client_front_p50_ms:.2f} | {r.max_spend_share:.3f} |"
        )
        if logged:
            rate = "-" if r.prefix_hit_rate is None else f"{r.prefix_hit_rate:.3f}"
            line += f" {rate} |"
        lines.append(line)
    kinds = [f"{r.release} {r.load}: {r.error_kinds}" for r in rows if r.error_kinds]
    notes = "".join(f"\nerrors, {k}" for k in kinds) + ("\n" if kinds else "")
    return "\n".join(lines) + "\n" + notes
