"""Stage `profile`: measure every executor of every pool per domain and write the measured pool
files (results/profiles/POOL.yaml) and a table (results/profiles/profiles.md)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task

from easy_core.evaluation import load_pool
from easy_core.profiles import measure_pool, measured_pool, measurements_markdown, write_pool
from easy_core.storage import atomic_write_text
from easy_core.suites.sim import SimSuite
from flows.settings import load_pool_secrets, params_from, publish_markdown, task_options


@task(task_run_name="profile-{pool_path}")
def profile_one(pool_path: str, params_path: str | None, out_dir: str) -> str:
    params = params_from(params_path)
    pool = load_pool(pool_path, params)
    config = params.profile
    tasks = list(SimSuite(params.sim).tasks("train", config.n_tasks, config.seed))
    measurements = measure_pool(pool, tasks, config.seed)
    write_pool(
        Path(out_dir) / f"{Path(pool_path).stem}.yaml", measured_pool(pool.config, measurements)
    )
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
