"""`easy serve` as users run it: a real server process on loopback, called with the official
`openai` client (sync and async, streaming and not), curl-like raw bodies for the refusals, and
SIGTERM's drain. The pool is sim-default with its world 50x faster than modelled."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
from typer.testing import CliRunner

from easy_core.benchmarks.serve_bench import ServerProcess
from easy_core.cli import application
from easy_core.core.params import Params
from easy_core.executors.pool import load_pool
from easy_core.policies.batch import run_episodes
from easy_core.runtime.episode import EpisodeRunner
from easy_core.world.suites.sim import SimSuite, generate_task
from tests.conftest import SIM_DEFAULT

KEYS = ["key-alpha-1234", "key-beta-5678"]
# the pool file's own cards, as the `params` fixture (and so `alone`) reads them: a checkout's
# results/profiles from a dvc repro must not give the server other cards than the reference
FAST = ["sim.time_scale=0.02", "profile.apply=false"]
pytestmark = pytest.mark.wall


@pytest.fixture(scope="module")
def server():
    with ServerProcess(SIM_DEFAULT, FAST, keys=KEYS) as process:
        yield process
    assert KEYS[0] not in process.output()  # keys never reach the log


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEYS[1], max_retries=0)


def alone(
    params: Params, tasks: list, policy: str = "greedy", budget_usd: float | None = None
) -> list[str | None]:
    """What each task's episode answers when it runs by itself, in virtual time, on the budget
    the server gives it (the request's, else the task's own within the server's cap)."""
    cap = params.serve.max_cost_usd
    tasks = [
        t.model_copy(update={"budget_usd": budget_usd or min(t.budget_usd, cap)}) for t in tasks
    ]
    runner = EpisodeRunner(load_pool(SIM_DEFAULT, params), params, SimSuite.check)
    return [t.final_answer for t in run_episodes(tasks, runner, policy, 0)]


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_models_lists_the_served_policies(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["greedy", "strongest", "cheapest", "random"]


def test_a_completion_answers_the_task_and_reports_where_it_ran(
    client: openai.OpenAI, params: Params
) -> None:
    task = generate_task(0, "test", 5)
    response = client.chat.completions.create(
        model="strongest", messages=user(task.prompt), extra_body={"max_cost_usd": 0.04}
    )
    (expected,) = alone(params, [task], "strongest", 0.04)
    assert expected and response.choices[0].message.content == expected
    assert response.choices[0].finish_reason == "stop"
    report = response.model_extra["easy"]
    assert report["task_id"] == task.id and report["policy"] == "strongest"
    steps = [s for m in report["milestones"] for s in m["steps"]]
    assert steps and {s["executor"] for s in steps} == {"sim-xl"}
    assert sum(report["cost_by_executor"].values()) == pytest.approx(report["cost_usd"])
    assert 0 < report["cost_usd"] <= 0.04 and report["budget_usd"] == 0.04
    usage = response.usage
    assert usage.prompt_tokens == sum(s["tokens_in"] for s in steps)
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert report["makespan_s"] <= report["server_s"]


def test_streaming_sends_milestones_and_steps_then_the_answer(
    client: openai.OpenAI, params: Params
) -> None:
    task = generate_task(0, "test", 6)
    chunks = list(
        client.chat.completions.create(model="greedy", messages=user(task.prompt), stream=True)
    )
    events = [c.model_extra.get("easy") or {} for c in chunks]
    kinds = [e.get("event") for e in events[:-1]]
    assert kinds[1] == "milestone" and "step" in kinds
    assert chunks[0].choices[0].delta.role == "assistant"
    answer = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert answer == alone(params, [task])[0]
    last = chunks[-1]
    assert last.choices[0].finish_reason == "stop" and last.usage.total_tokens > 0
    report = events[-1]
    n_steps = sum(len(m["steps"]) for m in report["milestones"])
    assert kinds.count("step") == n_steps and kinds.count("milestone") == len(report["milestones"])


def test_async_clients_at_once_each_get_their_own_task(
    server: ServerProcess, params: Params
) -> None:
    """Twenty-four distinct tasks at once over one shared dispatcher (async client, half of
    them streaming): every answer is the one its own task gets alone, and no request spends
    more than its budget."""
    tasks = [generate_task(0, "test", 100 + i) for i in range(24)]

    async def main() -> list[tuple[str, str, float]]:
        client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=KEYS[0], max_retries=0)

        async def one(i: int, task) -> tuple[str, str, float]:  # noqa: ANN001
            body = {"max_cost_usd": 0.004}
            if i % 2:
                stream = await client.chat.completions.create(
                    model="greedy", messages=user(task.prompt), stream=True, extra_body=body
                )
                chunks = [c async for c in stream]
                report = chunks[-1].model_extra["easy"]
                text = "".join(c.choices[0].delta.content or "" for c in chunks)
                return report["task_id"], text, report["cost_usd"]
            response = await client.chat.completions.create(
                model="greedy", messages=user(task.prompt), extra_body=body
            )
            report = response.model_extra["easy"]
            return report["task_id"], response.choices[0].message.content, report["cost_usd"]

        try:
            return await asyncio.gather(*(one(i, t) for i, t in enumerate(tasks)))
        finally:
            await client.close()

    got = asyncio.run(main())
    expected = alone(params, tasks, "greedy", 0.004)
    assert [g[0] for g in got] == [t.id for t in tasks]
    assert [g[1] or None for g in got] == expected
    assert max(g[2] for g in got) <= 0.004


def test_keys_are_required(server: ServerProcess) -> None:
    for key in ("wrong-key", KEYS[0][:-1]):
        bad = openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0)
        with pytest.raises(openai.AuthenticationError) as info:
            bad.models.list()
        assert info.value.body["code"] == "invalid_api_key"
        assert key not in str(info.value.body)
    assert httpx.get(f"{server.url}/v1/models").status_code == 401


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": "nope", "messages": user("x")}, 404, "model"),
        ({"model": "greedy", "messages": []}, 400, "messages"),
        (
            {"model": "greedy", "messages": [{"role": "system", "content": "be brief"}]},
            400,
            "messages",
        ),
        ({"model": "greedy", "messages": user("x"), "max_cost_usd": -1}, 400, "max_cost_usd"),
        ({"model": "greedy", "messages": user("x"), "max_cost_usd": 5.0}, 400, "max_cost_usd"),
        ({"model": "greedy", "messages": user("x"), "max_seconds": 1e9}, 400, "max_seconds"),
        ({"model": "greedy", "messages": user("x" * 40_000)}, 400, "messages[0].content"),
        (
            {"model": "greedy", "messages": [{"role": "robot", "content": "x"}]},
            400,
            "messages[0].role",
        ),
        ({"messages": user("x")}, 400, "model"),
        ({"model": "greedy", "messages": user("x"), "stream": "often"}, 400, "stream"),
    ],
)
def test_refusals_are_openai_errors_naming_the_field(
    server: ServerProcess, body: dict, status: int, param: str
) -> None:
    headers = {"Authorization": f"Bearer {KEYS[0]}"}
    response = httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=headers)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["message"] and error["type"]


def test_malformed_and_oversized_bodies_are_refused(server: ServerProcess) -> None:
    headers = {"Authorization": f"Bearer {KEYS[0]}", "Content-Type": "application/json"}
    url = f"{server.url}/v1/chat/completions"
    response = httpx.post(url, content=b'{"model": "greedy", "messages": [', headers=headers)
    assert response.status_code == 400 and "JSON" in response.json()["error"]["message"]
    response = httpx.post(url, content=b"x" * 5_000_000, headers=headers)
    assert response.status_code == 413
    assert httpx.get(f"{server.url}/health").json()["status"] == "ok"


def test_sigterm_finishes_in_flight_requests_then_exits() -> None:
    """A request in flight when SIGTERM arrives is answered; then the server exits and takes no
    new connection."""
    with ServerProcess(SIM_DEFAULT, ["sim.time_scale=0.3"]) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0)
        task = generate_task(0, "test", 2)  # a chain: several seconds at this scale

        async def main() -> str:
            async_client = openai.AsyncOpenAI(
                base_url=f"{server.url}/v1", api_key="none", max_retries=0
            )
            request = asyncio.create_task(
                async_client.chat.completions.create(model="greedy", messages=user(task.prompt))
            )
            await asyncio.sleep(1.0)
            server.process.send_signal(signal.SIGTERM)
            response = await request
            await async_client.close()
            return response.choices[0].message.content

        started = time.monotonic()
        assert asyncio.run(main())
        # uvicorn re-raises the signal once drained, so the exit is by SIGTERM, as supervisors
        # (Kubernetes, systemd) expect of a process they stopped
        assert server.process.wait(30) in (0, -signal.SIGTERM)
        assert time.monotonic() - started > 1.0
        with pytest.raises(openai.APIConnectionError):
            client.models.list()


def test_the_oracle_is_never_served() -> None:
    result = CliRunner().invoke(
        application.app,
        ["serve", "--pool", str(SIM_DEFAULT), "--policy", "oracle", "--no-auth"],
    )
    assert result.exit_code == 2 and "never served" in result.output


def test_without_keys_only_on_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EASY_API_KEYS", raising=False)
    runner = CliRunner()
    result = runner.invoke(application.app, ["serve", "--pool", str(SIM_DEFAULT)])
    assert result.exit_code == 2 and "EASY_API_KEYS" in result.output
    result = runner.invoke(
        application.app, ["serve", "--pool", str(SIM_DEFAULT), "--host", "0.0.0.0", "--no-auth"]
    )
    assert result.exit_code == 2 and "without keys" in result.output


def test_schemathesis_finds_no_server_error_and_no_schema_violation(tmp_path: Path) -> None:
    """schemathesis fuzzes the server's own OpenAPI schema (every check but the acceptance of
    schema-valid bodies: the schema cannot say "at least one non-empty user message", which the
    server refuses with a 400 naming `messages`); afterwards the server still answers."""
    import shutil
    import subprocess

    st = shutil.which("st") or str(Path(sys.executable).parent / "st")
    with ServerProcess(SIM_DEFAULT, FAST, keys=KEYS) as server:
        result = subprocess.run(
            [
                st,
                "run",
                f"{server.url}/openapi.json",
                "--checks",
                "all",
                "--exclude-checks",
                "positive_data_acceptance",
                "-H",
                f"Authorization: Bearer {KEYS[0]}",
                "--max-examples",
                "60",
                "--seed",
                "7",
                "--request-timeout",
                "60",
                "--generation-database",
                "none",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,  # its crash cache lands there, not in the checkout
        )
        assert result.returncode == 0, result.stdout[-4000:]
        task = generate_task(0, "test", 1)
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEYS[0], max_retries=0)
        answer = client.chat.completions.create(model="greedy", messages=user(task.prompt))
        assert answer.model_extra["easy"]["task_id"] == task.id
        assert "Traceback" not in server.output()


def test_a_fault_of_the_server_is_a_500_that_says_nothing(params: Params) -> None:
    from fastapi.testclient import TestClient

    from easy_core.service.app import create_app
    from easy_core.service.completions import CompletionService

    service = CompletionService(load_pool(SIM_DEFAULT, params), params)

    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("database password is hunter2")

    service.complete = broken  # type: ignore[method-assign]
    with TestClient(create_app(service, None)) as http:
        response = http.post(
            "/v1/chat/completions", json={"model": "greedy", "messages": user("x")}
        )
        assert response.status_code == 500
        assert "hunter2" not in response.text and response.json()["error"]["type"] == "server_error"
        assert http.get("/health").status_code == 200


REMOTE_POOL = """
schema_version: 1
name: two-remotes
executors:
{executors}
"""
REMOTE = """  - name: {name}
    backend: openai
    endpoint: {url}/v1
    model: greedy
    price_in_per_1m: {price}
    price_out_per_1m: {price}
    latency: {{ttft_s: 0.05, tokens_per_s: 200}}
    context_window: 8192
    max_concurrency: 8
    capability:
      math: {{success: 0.9, n: 10}}
"""


def test_an_executor_server_killed_mid_load_falls_back_and_nothing_hangs(tmp_path: Path) -> None:
    """Pool B's two executors are OpenAI-compatible servers (two more `easy serve` processes);
    the cheaper one is killed mid-load. Every request ends inside its budget and time: its steps
    retried on, or fell back to, the survivor."""
    from easy_core.benchmarks.serve_bench import drive

    upstream = ["sim.time_scale=0.05"]
    with ServerProcess(SIM_DEFAULT, upstream) as a, ServerProcess(SIM_DEFAULT, upstream) as b:
        executors = REMOTE.format(name="remote-a", url=a.url, price=0.1) + REMOTE.format(
            name="remote-b", url=b.url, price=1.0
        )
        pool = tmp_path / "two-remotes.yaml"
        pool.write_text(REMOTE_POOL.format(executors=executors))
        overrides = ["serve.suite=math", "resilience.backoff_s=0.05"]
        with ServerProcess(pool, overrides) as front:

            async def load() -> tuple[list[dict], int, float]:
                driving = asyncio.create_task(
                    drive(front.url, "greedy", 10.0, 40, max_cost_usd=0.01, time_limit_s=120)
                )
                await asyncio.sleep(1.5)
                a.kill()  # a crash, not a drain
                return await driving

            results, errors, wall = asyncio.run(load())
    assert not errors and len(results) == 40
    steps = [s for r in results for m in r["milestones"] for s in m["steps"]]
    assert any(s["executor"] == "remote-a" and s["status"] == "ok" for s in steps)  # before
    assert any(s["executor"] == "remote-b" and s["attempts"] > 1 for s in steps)  # fell back
    for r in results:
        assert r["cost_usd"] <= r["budget_usd"] and r["server_s"] <= r["budget_s"] + 5


def test_the_kubernetes_manifest_matches_the_server(params: Params) -> None:
    import yaml

    from tests.conftest import ROOT

    deployment, service = yaml.safe_load_all((ROOT / "infra/k8s/serve.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["terminationGracePeriodSeconds"] > params.serve.drain_s
    args = container["args"]
    assert args[:2] == ["easy", "serve"] and "--no-auth" not in args
    assert (ROOT / args[args.index("--pool") + 1]).is_file()
    port = int(args[args.index("--port") + 1])
    assert container["ports"][0]["containerPort"] == port
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert container["env"][0]["name"] == "EASY_API_KEYS"
    assert service["spec"]["ports"][0]["targetPort"] == container["ports"][0]["name"]


LLAMA_LOG = """\
INFO:     127.0.0.1:46532 - "POST /v1/chat/completions HTTP/1.1" 200 OK
llama_perf_context_print: prompt eval time =       0.06 ms /    53 tokens (    0.00 ms per token)
llama_perf_context_print:        eval time =      66.55 ms /     1 runs   (   66.55 ms per token)
Llama.generate: 44 prefix-match hit, remaining 9 prompt tokens to eval
llama_perf_context_print: prompt eval time =     291.37 ms /     9 tokens (   32.37 ms per token)
llama_perf_context_print:        eval time =     148.92 ms /     2 runs   (   74.46 ms per token)
"""


def test_the_prefix_cache_hit_rate_is_read_from_what_the_servers_append(tmp_path: Path) -> None:
    """Lines of llama-cpp-python's server as it writes them (a cold prompt of 53 tokens, then one
    reusing 44): reused over all prompt tokens, counting only what came after the mark."""
    from easy_core.benchmarks.serve_bench import ServerLogs, prefix_cache_tokens
    from easy_core.core.errors import ConfigError

    assert prefix_cache_tokens(LLAMA_LOG) == (44, 62)
    log = tmp_path / "llama.log"
    log.write_text("Llama.generate: 500 prefix-match hit, remaining 1 prompt tokens to eval\n")
    logs = ServerLogs([log])
    assert logs.hit_rate() is None  # nothing appended yet
    with log.open("a") as f:
        f.write(LLAMA_LOG)
    assert logs.hit_rate() == pytest.approx(44 / (44 + 62))
    logs.mark()
    assert logs.hit_rate() is None
    with pytest.raises(ConfigError, match="ladder-up.sh"):
        ServerLogs([tmp_path / "missing.log"])


def test_the_front_benchmark_times_the_front_apart_from_the_episode(params: Params) -> None:
    """`easy bench front`: compound questions through the app in process; the front's time is
    the server's header less the episode's real time, so it is positive and below what the
    client sees on top of the same episode."""
    result = CliRunner().invoke(application.app, ["bench", "front", "--n", "3"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert figures["n"] == 3 and figures["suite"] == "math-compound"
    assert figures["steps_per_request"] >= 4  # 3 to 6 parts and the combining step
    assert 0 < figures["server_p50_ms"] < figures["client_p50_ms"]
