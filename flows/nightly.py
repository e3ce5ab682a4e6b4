"""The nightly evaluation (deployment `nightly-eval`, cron 0 3 * * * UTC): the evaluate stage
with params.nightly, results kept per night under results/nightly/DATE/."""

from __future__ import annotations

from datetime import UTC, datetime

from prefect import flow

from easy_core.core.schemas import EvalMetrics
from flows.evaluate import run_evaluation
from flows.settings import params_from


@flow(name="nightly-eval", log_prints=True)
def nightly_flow(
    params_path: str | None = None, out_root: str = "results/nightly"
) -> list[EvalMetrics]:
    config = params_from(params_path).nightly
    night = datetime.now(UTC).strftime("%Y-%m-%d")
    return run_evaluation(config, params_path, f"{out_root}/{night}", f"nightly evaluation {night}")


if __name__ == "__main__":
    nightly_flow()
