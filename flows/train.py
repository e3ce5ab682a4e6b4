"""Stage `train`: the LLM orchestrator with TRL, SFT warm start (models/sft) then GRPO on the
tree rollouts of the rollouts stage (models/grpo); each checkpoint with weights, tokenizer and
model card, its curve and metrics under results/training/{sft,grpo}/, published as Prefect
artifacts."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger

from easy_core.learning.grpo import read_trees, train_grpo
from easy_core.learning.sft import train_sft
from flows.settings import params_from, publish_image, publish_markdown


def _publish(name: str, metrics: dict, report: Path) -> None:
    rows = "\n".join(f"| {k} | {v} |" for k, v in metrics.items())
    publish_markdown(f"{name}-training", f"| figure | value |\n|---|---|\n{rows}\n")
    publish_image(f"{name}-training-curve", report / "curve.png")


# log_prints off, explicitly (None would inherit the pipeline flow's True): dill (datasets'
# fingerprinting) reads disassembly from a captured stdout, which Prefect's print patch would
# turn into ~180 log lines and an empty capture.
@flow(name="train", log_prints=False)
def train_flow(
    params_path: str | None = None,
    report_dir: str = "results/training",
    trees_path: str = "data/trees/trees.jsonl",
) -> dict:
    params = params_from(params_path)
    sft = train_sft(params.sft, params.sft.out, Path(report_dir) / "sft")
    _publish("sft", sft, Path(report_dir) / "sft")
    params.grpo.base_model = params.sft.out
    grpo = train_grpo(params, params.grpo.out, Path(report_dir) / "grpo", read_trees(trees_path))
    _publish("grpo", grpo, Path(report_dir) / "grpo")
    get_run_logger().info("sft %s; grpo %s", sft, grpo)
    return {"sft": sft, "grpo": grpo, "last_loss": sft["last_loss"]}


if __name__ == "__main__":
    train_flow()
