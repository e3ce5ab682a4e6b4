"""Stage `sft_data`: teacher trajectories on the training splits of the sim suite and of the real
suites in `sft_data.real`, kept where they succeeded, as chat examples for the supervised warm
start (data/sft/train.jsonl, summary.json)."""

from __future__ import annotations

import json
from pathlib import Path

from prefect import flow

from easy_core.sft_data import teacher_dataset
from easy_core.storage import atomic_write_text, write_json
from flows.settings import load_pool_secrets, params_from


@flow(name="sft-data", log_prints=True)
def sft_data_flow(params_path: str | None = None, out_dir: str = "data/sft") -> dict:
    params = params_from(params_path)
    load_pool_secrets(params)
    examples, summary = teacher_dataset(params)
    atomic_write_text(
        Path(out_dir) / "train.jsonl", "".join(json.dumps(e) + "\n" for e in examples)
    )
    write_json(Path(out_dir) / "summary.json", summary)
    print(summary)
    return summary


if __name__ == "__main__":
    sft_data_flow()
