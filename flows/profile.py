"""Stage `profile`: measure every executor of every pool per domain on `profile.suites` and write
the measured profiles (`profile.out_dir`/POOL.yaml, the format a pool's `profile:` reads) and a
table (profiles.md). Every later stage's pools take their cards from these files
(`executors.pool.load_pool`); the measurement itself starts from the pool files' own values."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task

from easy_core.core.storage import atomic_write_text
from easy_core.evaluation.profiling import measurements_markdown, profile_pool, write_profile
from easy_core.executors.pool import load_pool
from easy_core.world.suites import get_suite
from flows.settings import load_pool_secrets, params_from, publish_markdown, task_options


@task(task_run_name="profile-{pool_path}")
def profile_one(pool_path: str, params_path: str | None, out_dir: str) -> str:
    params = params_from(params_path)
    config = params.profile
    # measured from the pool file, not from an earlier measurement of it
    pool = load_pool(
        pool_path, params.model_copy(update={"profile": config.model_copy(update={"apply": False})})
    )
    suites = [(name, get_suite(name, params)) for name in config.suites]
    profile, measurements = profile_pool(pool, suites, config.n_tasks, config.seed)
    write_profile(Path(out_dir) / f"{Path(pool_path).stem}.yaml", profile)
    return f"## {pool.name}\n\n{measurements_markdown(measurements)}"


@flow(name="profile", log_prints=True)
def profile_flow(params_path: str | None = None, out_dir: str | None = None) -> str:
    params = params_from(params_path)
    out_dir = out_dir or params.profile.out_dir
    load_pool_secrets(params)
    one = profile_one.with_options(**task_options(params))
    sections = [one(pool, params_path, out_dir) for pool in params.profile.pools]
    report = "# Executor profiles (measured)\n\n" + "\n".join(sections)
    atomic_write_text(Path(out_dir) / "profiles.md", report)
    publish_markdown("executor-profiles", report, "success per executor and domain")
    return report


if __name__ == "__main__":
    profile_flow()
