"""The HTTP front (FastAPI): `GET /v1/models`, `POST /v1/chat/completions` (JSON, or server-sent
events with `stream: true`), `GET /health`. Every refusal is an OpenAI-style error object with a
4xx status naming the field; a fault of the server is a 500 that says nothing of its cause (the
traceback goes to the server's log, which never holds keys or request bodies)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from easy_core.core.schemas import Task
from easy_core.service.auth import authorized
from easy_core.service.completions import CompletionService, Event, RequestError
from easy_core.service.protocol import (
    ChatCompletion,
    ChatCompletionRequest,
    ErrorResponse,
    ModelCard,
    ModelList,
    error_body,
)

log = logging.getLogger("easy.serve")
MAX_BODY_BYTES = 4_000_000

_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": description}
    for status, description in {
        400: "the body is malformed or a field is out of range (the error names it)",
        401: "no or wrong API key",
        404: "the model (policy) is not served here",
        413: "the body is too large",
        429: "the server runs as many requests as it may",
        500: "a fault of the server",
        504: "the request ran past its time budget",
    }.items()
}


def _error(
    status: int, message: str, kind: str, param: str | None = None, code: str | None = None
) -> JSONResponse:
    return JSONResponse(error_body(message, kind, param, code), status_code=status)


def _field(loc: tuple[Any, ...]) -> str | None:
    parts = [str(p) for p in loc if p != "body"]
    if not parts:
        return None
    text = parts[0]
    for part in parts[1:]:
        text += f"[{part}]" if part.isdigit() else f".{part}"
    return text


class _Guard:
    """Before routing: a body over MAX_BODY_BYTES is a 413, a `/v1/` request without a valid
    key a 401. Around it: a fault of ours is logged and answered with a 500 that says nothing
    of it, and every response carries `x-easy-server-ms`, the time from the request's arrival
    to its response's start (parsing, checks, the episode and serialising included; the load
    benchmark subtracts the makespan). A plain ASGI middleware: Starlette's `@app.middleware`
    wraps every request in a task group and a body stream, which is most of the front's own
    time per request."""

    def __init__(self, app: ASGIApp, keys: list[str] | None):
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        length = headers.get("content-length")
        refusal = None
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            refusal = _error(
                413, f"the body is larger than {MAX_BODY_BYTES} bytes", "invalid_request_error"
            )
        elif (
            self.keys is not None
            and scope["path"].startswith("/v1/")
            and not authorized(headers.get("authorization"), self.keys)
        ):
            refusal = _error(
                401,
                "missing or wrong API key: send `Authorization: Bearer KEY` with a key "
                "from the server's EASY_API_KEYS",
                "authentication_error",
                code="invalid_api_key",
            )
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        started = time.perf_counter()
        response_started = False

        async def stamped(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
                elapsed_ms = 1000 * (time.perf_counter() - started)
                MutableHeaders(scope=message).append("x-easy-server-ms", f"{elapsed_ms:.3f}")
            await send(message)

        try:
            await self.app(scope, receive, stamped)
        except Exception:  # a fault of ours: log it, say nothing of it
            log.exception("fault while serving %s %s", scope["method"], scope["path"])
            if not response_started:
                await _error(500, "internal server error", "server_error")(scope, receive, send)


def create_app(service: CompletionService, keys: list[str] | None) -> FastAPI:
    """The app over one service. `keys`: the accepted client keys; None serves without keys
    (`--no-auth`, for a local endpoint)."""
    app = FastAPI(
        title="easy",
        summary="An OpenAI-compatible endpoint over an executor pool: each request runs the "
        "milestone-plan-act loop and answers with the result and where it ran.",
        version="1",
        responses=_ERRORS,
    )

    app.add_middleware(_Guard, keys=keys)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        param = _field(tuple(first.get("loc", ())))
        message = first.get("msg", "invalid request")
        where = f"{param}: " if param else ""
        return _error(400, f"{where}{message}", "invalid_request_error", param)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        response = _error(exc.status_code, str(exc.detail), kind)
        response.headers.update(getattr(exc, "headers", None) or {})  # 405's Allow
        return response

    @app.exception_handler(RequestError)
    async def refused(request: Request, exc: RequestError) -> JSONResponse:
        return _error(exc.status, exc.message, exc.kind, exc.param, exc.code)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        """Liveness, and what the shared dispatcher holds: per executor, steps running and
        waiting, steps started, and their mean wait for a slot."""
        lanes = {
            name: {
                "running": len(lane.running),
                "waiting": len(lane.waiting),
                "started": lane.stats.started,
                "mean_wait_s": lane.stats.mean_wait_s,
            }
            for name, lane in service.dispatcher.lanes.items()
        }
        return {
            "status": "ok",
            "pool": service.pool.name,
            "release": service.rule.name,
            "in_flight": service.in_flight,
            "lanes": lanes,
        }

    @app.get("/v1/models", response_model=ModelList)
    async def models() -> ModelList:
        return ModelList(
            data=[ModelCard(id=name, created=service.created) for name in service.policies]
        )

    @app.post(
        "/v1/chat/completions",
        response_model=ChatCompletion,
        responses={200: {"content": {"text/event-stream": {}}}},
    )
    async def chat_completions(body: ChatCompletionRequest) -> Any:
        if not body.stream:
            # Serialised here: FastAPI would validate the finished completion again first.
            result = await service.complete(body)
            return Response(result.model_dump_json(), media_type="application/json")
        resolved = service.task_of(body)  # refuse before the stream starts, with a status
        return StreamingResponse(_stream(service, body, resolved), media_type="text/event-stream")

    def openapi() -> dict[str, Any]:
        """The schema with this server's own values: the served policies as `model`'s enum,
        and its caps as the bounds of the budgets, conversation and message lengths (so
        clients and fuzzers see what is accepted)."""
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title, version=app.version, summary=app.summary, routes=app.routes
            )
            parts = schema["components"]["schemas"]
            request = parts["ChatCompletionRequest"]["properties"]
            serve = service.params.serve
            request["model"]["enum"] = list(service.policies)
            request["messages"]["maxItems"] = serve.max_messages
            for field, cap in (
                ("max_cost_usd", serve.max_cost_usd),
                ("max_seconds", serve.max_seconds),
            ):
                for option in request[field]["anyOf"]:
                    if option.get("type") == "number":
                        option["maximum"] = cap
            parts["ChatMessage"]["properties"]["content"]["maxLength"] = serve.max_message_chars
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


async def _stream(
    service: CompletionService, body: ChatCompletionRequest, resolved: tuple[str, Task]
) -> AsyncIterator[str]:
    """Server-sent events in OpenAI's chunk format: a role chunk, one chunk per milestone and
    per finished step (their detail in `easy`), the answer, then the finish chunk with usage and
    the full report, then `[DONE]`. A client that goes away cancels its episode."""
    queue: asyncio.Queue[Event | None] = asyncio.Queue()
    chunk_id = f"chatcmpl-{uuid.uuid4().hex}"
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        payload = {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": body.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
        return f"data: {json.dumps(payload)}\n\n"

    async def run() -> ChatCompletion:
        try:
            return await service.complete(body, queue.put_nowait, resolved)
        finally:
            queue.put_nowait(None)

    task = asyncio.create_task(run())
    try:
        yield chunk({"role": "assistant", "content": ""})
        while (event := await queue.get()) is not None:
            yield chunk({}, easy=event)
        try:
            result = task.result()
        except RequestError as exc:
            yield f"data: {json.dumps(error_body(exc.message, exc.kind, exc.param, exc.code))}\n\n"
            return
        except Exception:
            log.exception("fault while streaming a completion")
            yield f"data: {json.dumps(error_body('internal server error', 'server_error'))}\n\n"
            return
        choice = result.choices[0]
        yield chunk({"content": choice.message.content})
        yield chunk(
            {},
            choice.finish_reason,
            usage=result.usage.model_dump(),
            easy=result.easy.model_dump(),
        )
        yield "data: [DONE]\n\n"
    finally:
        if not task.done():
            task.cancel()
