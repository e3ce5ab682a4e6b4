"""Stage `profile`: measure every executor of every pool per domain on `profile.suites` and write
the measured profiles (results/profiles/POOL.yaml, the format a pool's `profile:` reads) and a
table (results/profiles/profiles.md)."""

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
    pool = load_pool(pool_path, params)
    config = params.profile
    suites = [(name, get_suite(name, params)) for name in config.suites]
    profile, measurements = profile_pool(pool, suites, config.n_tasks, config.seed)
    write_profile(Path(out_dir) / f"{Path(pool_path).stem}.yaml", profile)
    return f"## {pool.name}\n\n{measurements_markdown(measurements)}"


@flow(name="profile", log_prints=True)
def profile_flow(params_path: str | None = None, out_dir: str = "results/profiles") -> str:
    params = params_from(params_path)
    load_pool_secrets(params)
    one = profile_one.with_options(**task_options(params))
    sections = [one(pool, params_path, out_dir) for pool in params.profile.pools]
    report = "# Executor profiles (measured)\n\n" + "\n".join(sections)
    atomic_write_text(Path(out_dir) / "profiles.md", report)
    publish_markdown("executor-profiles", report, "success per executor and domain")
    return report


if __name__ == "__main__":
    profile_flow()
