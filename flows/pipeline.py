"""The whole pipeline as one flow: profile -> sft data -> rollouts (with their reward table and
trees) -> train (SFT, GRPO) -> learned policies -> evaluate.
(`dvc repro` runs the same stages one by one, each only when its inputs changed.)"""

from __future__ import annotations

import json
from pathlib import Path

from prefect import flow

from flows.evaluate import evaluate_flow
from flows.policies import policies_flow
from flows.profile import profile_flow
from flows.rollouts import rollouts_flow
from flows.sft_data import sft_data_flow
from flows.train import train_flow


@flow(name="pipeline", log_prints=True)
def pipeline_flow(params_path: str | None = None) -> dict:
    profile_flow(params_path)
    sft = sft_data_flow(params_path)
    manifest = rollouts_flow(params_path)
    training = train_flow(params_path)
    rewards = json.loads(Path("data/rewards/summary.json").read_text())
    policies_flow(params_path)
    metrics = evaluate_flow(params_path)
    return {
        "sft_examples": sft["examples"],
        "sft_last_loss": training["last_loss"],
        "rollout_episodes": sum(s.records for s in manifest.shards),
        "mean_reward": rewards["mean_total"],
        "evaluations": len(metrics),
    }


if __name__ == "__main__":
    pipeline_flow()
