"""Stage `train`: the SFT warm start of the LLM orchestrator with TRL (models/sft: weights,
tokenizer, model card), its training curve and metrics (results/training/), published as Prefect
artifacts. RL (GRPO on tree rollouts) joins this stage with the orchestrator-training issue."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from easy_core.training.sft import train_sft
from flows.settings import params_from, publish_image, publish_markdown


@flow(name="train", log_prints=True)
def train_flow(params_path: str | None = None, report_dir: str = "results/training") -> dict:
    params = params_from(params_path)
    metrics = train_sft(params.sft, params.sft.out, report_dir)
    rows = "\n".join(f"| {k} | {v} |" for k, v in metrics.items())
    publish_markdown("sft-training", f"| figure | value |\n|---|---|\n{rows}\n")
    publish_image("sft-training-curve", Path(report_dir) / "curve.png")
    print(metrics)
    return metrics


if __name__ == "__main__":
    train_flow()
