"""Running the endpoint: uvicorn on one event loop that every request's episode shares (the
shared dispatcher lives on it). SIGTERM stops accepting connections, lets in-flight requests
finish for up to `serve.drain_s`, then exits (uvicorn's graceful shutdown)."""

from __future__ import annotations

import uvicorn

from easy_core.core.errors import ConfigError
from easy_core.service.app import create_app
from easy_core.service.completions import CompletionService

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def serve(
    service: CompletionService,
    host: str = "127.0.0.1",
    port: int = 8000,
    keys: list[str] | None = None,
) -> None:
    """Serve until SIGTERM or SIGINT. `keys=None` serves without authentication, which only a
    loopback address may do."""
    if keys is None and host not in LOOPBACK:
        raise ConfigError(
            f"serving on {host} without keys would let anyone on the network spend the pool's "
            "budget: set EASY_API_KEYS, or bind to 127.0.0.1 with --no-auth"
        )
    if keys is not None and not keys:
        raise ConfigError(
            "no client keys: set EASY_API_KEYS=key1,key2 (or a Prefect Secret block with the "
            "serve flow), or start a local endpoint with --no-auth"
        )
    config = uvicorn.Config(
        create_app(service, keys),
        host=host,
        port=port,
        timeout_graceful_shutdown=int(service.params.serve.drain_s),
        access_log=False,  # an access log would hold nothing secret, but is noise under load
        log_level="info",
    )
    uvicorn.Server(config).run()
