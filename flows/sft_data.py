"""Stage `sft_data`: teacher trajectories on the training splits of the sim suite and of the real
suites in `sft_data.real`, kept where they succeeded, as chat examples for the supervised warm
start (data/sft/train.jsonl, summary.json)."""

from __future__ import annotations

from prefect import flow

from easy_core.learning.teacher_data import write_teacher_dataset
from flows.settings import load_pool_secrets, params_from


@flow(name="sft-data", log_prints=True)
def sft_data_flow(params_path: str | None = None, out_dir: str = "data/sft") -> dict:
    params = params_from(params_path)
    load_pool_secrets(params)
    summary = write_teacher_dataset(params, out_dir)
    print(summary)
    return summary


if __name__ == "__main__":
    sft_data_flow()
