"""What every flow shares: params.yaml, task options from it, and artifact helpers."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path
from typing import Any

from prefect.artifacts import (
    acreate_markdown_artifact,
    create_image_artifact,
    create_markdown_artifact,
)
from prefect.blocks.system import Secret
from prefect.filesystems import LocalFileSystem, RemoteFileSystem
from prefect.task_runners import ThreadPoolTaskRunner

from easy_core.core.config import load_yaml_model
from easy_core.core.errors import ConfigError
from easy_core.core.params import Params, load_params
from easy_core.core.schemas import PoolConfig

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PARAMS = ROOT / "params.yaml"


def params_from(path: str | None) -> Params:
    """params.yaml (the repository's by default), with relative pool paths that do not exist
    from the working directory taken relative to the repository, so flows run from anywhere."""
    params = load_params(Path(path) if path else DEFAULT_PARAMS)

    def where(pool: str) -> str:
        return pool if Path(pool).exists() else str(ROOT / pool)

    for section in (params.profile, params.evaluate, params.nightly):
        section.pools = [where(pool) for pool in section.pools]
    for section in (params.sft_data, params.rollouts, params.inference, params.policy_training):
        section.pool = where(section.pool)
    for real in params.sft_data.real:
        real.pool = where(real.pool)
    return params


def load_pool_secrets(params: Params) -> int:
    """`load_secret_blocks` for every pool params.yaml names; each flow calls it first."""
    pools = {
        *params.profile.pools,
        *params.evaluate.pools,
        *params.nightly.pools,
        params.sft_data.pool,
        *(real.pool for real in params.sft_data.real),
        params.rollouts.pool,
        params.inference.pool,
    }
    return sum(load_secret_blocks(pool) for pool in sorted(pools))


def load_secret_blocks(pool_path: str) -> int:
    """Put the API keys that a pool's executors keep in Prefect Secret blocks into the
    environment variables they name (`api_key_secret_block` -> `api_key_env`). Returns how many
    were loaded; values are never logged."""
    config = load_yaml_model(pool_path, PoolConfig)
    loaded = 0
    for profile in config.executors:
        if profile.api_key_secret_block:
            if not profile.api_key_env:
                raise ConfigError(
                    f"{pool_path}: executor {profile.name!r} has api_key_secret_block but no "
                    "api_key_env to put the key in"
                )
            os.environ[profile.api_key_env] = str(Secret.load(profile.api_key_secret_block).get())
            loaded += 1
    return loaded


def task_options(params: Params) -> dict[str, Any]:
    """Retries with backoff, the timeout and the result storage every pipeline task gets
    (params: pipeline)."""
    p = params.pipeline
    options: dict[str, Any] = {
        "retries": p.task_retries,
        "retry_delay_seconds": p.task_retry_delay_s,
        "timeout_seconds": p.task_timeout_s,
    }
    if p.result_storage:
        options["result_storage"] = result_storage_block(p.result_storage)
    return options


def result_storage_block(location: str) -> str:
    """Save (idempotently) a file-system block for `location` and return its reference:
    Prefect wants result storage persisted server-side. fsspec URLs (s3://...) go through
    s3fs, with credentials and endpoint from the environment."""
    storage_cls = RemoteFileSystem if "://" in location else LocalFileSystem
    name = "easy-results-" + hashlib.sha256(location.encode()).hexdigest()[:12]
    storage_cls(basepath=location).save(name, overwrite=True)
    return f"{storage_cls.get_block_type_slug()}/{name}"


DASK_ADDRESS_ENV = "EASY_DASK_ADDRESS"


def task_runner(params: Params) -> Any:
    """The task runner `pipeline.task_runner` names: the thread pool, or a Dask cluster at
    `pipeline.dask_address` or EASY_DASK_ADDRESS (without either, a local cluster of worker
    processes, started and stopped with the flow run)."""
    settings = params.pipeline
    if settings.task_runner == "threads":
        return ThreadPoolTaskRunner(max_workers=settings.max_workers)
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError:
        raise ConfigError(
            "pipeline.task_runner: dask needs prefect-dask: pip install -e '.[dask]'"
        ) from None
    address = settings.dask_address or os.environ.get(DASK_ADDRESS_ENV)
    if address:
        return DaskTaskRunner(address=address)
    return DaskTaskRunner(cluster_kwargs={"processes": True})


def artifact_key(text: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes."""
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")


def publish_markdown(key: str, markdown: str, description: str = "") -> None:
    create_markdown_artifact(markdown=markdown, key=artifact_key(key), description=description)


async def apublish_markdown(key: str, markdown: str, description: str = "") -> None:
    """`publish_markdown` for async flows."""
    await acreate_markdown_artifact(
        markdown=markdown, key=artifact_key(key), description=description
    )


def publish_image(key: str, png: Path, description: str = "") -> None:
    """A PNG as an image artifact, embedded as a data URL so it needs no file server."""
    url = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode()
    create_image_artifact(image_url=url, key=artifact_key(key), description=description)
