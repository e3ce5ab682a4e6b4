"""`easy serve`: the OpenAI-compatible endpoint over a pool."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from easy_core.cli.app import ParamsOption, app, err, resolve_params, user_errors


@app.command("serve")
@user_errors
def serve_command(
    pool: Annotated[Path, typer.Option(help="pool YAML, e.g. configs/pools/sim-default.yaml")],
    policy: Annotated[
        str | None,
        typer.Option(help="the default policy (served first) [params: serve.policies]"),
    ] = None,
    host: Annotated[str, typer.Option(help="address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8000,
    release: Annotated[
        str | None,
        typer.Option(help="eager, tail_risk, prefix or coact [params: serve.release]"),
    ] = None,
    no_auth: Annotated[
        bool, typer.Option("--no-auth", help="accept requests without a key (loopback only)")
    ] = False,
    params_path: ParamsOption = None,
) -> None:
    """Serve the milestone-plan-act loop as an OpenAI-compatible endpoint: clients send chat
    completions with the policy as `model`; keys come from EASY_API_KEYS."""
    from easy_core.service.auth import keys_from_env
    from easy_core.service.completions import CompletionService
    from easy_core.service.server import serve

    params = resolve_params(params_path, {"serve.release": release})
    service = CompletionService.from_pool_file(pool, params, policy)
    keys = None if no_auth else keys_from_env()
    err.print(
        f"easy serve: {pool} on http://{host}:{port}/v1, policies {', '.join(service.policies)}, "
        f"release {params.serve.release}, {'no auth' if keys is None else f'{len(keys)} key(s)'}"
    )
    serve(service, host, port, keys)
