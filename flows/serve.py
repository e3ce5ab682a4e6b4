"""The `serve` flow: `easy serve` as a long-running Prefect flow run on a work pool (a process
worker on one machine, or a Kubernetes pod). Client keys come from a Prefect Secret block
(comma-separated) or, without one, from EASY_API_KEYS; executor keys from the pool's own
Secret blocks. Cancelling the flow run stops the server (SIGTERM: it drains first)."""

from __future__ import annotations

from prefect import flow
from prefect.blocks.system import Secret

from easy_core.service.auth import keys_from_env
from easy_core.service.completions import CompletionService
from easy_core.service.server import serve
from flows.settings import load_secret_blocks, params_from


@flow(name="serve", log_prints=True)
def serve_flow(
    pool: str = "configs/pools/sim-default.yaml",
    policy: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    keys_block: str | None = None,
    params_path: str | None = None,
) -> None:
    """Serve `pool` until the flow run is cancelled. `keys_block`: a Secret block holding the
    client keys, comma-separated."""
    params = params_from(params_path)
    load_secret_blocks(pool)
    if keys_block is not None:
        value = Secret.load(keys_block).get()
        keys = [key.strip() for key in str(value).split(",") if key.strip()]
    else:
        keys = keys_from_env()
    service = CompletionService.from_pool_file(pool, params, policy)
    print(f"serving {pool} on http://{host}:{port}/v1 ({len(keys)} client key(s))")
    serve(service, host, port, keys)
