"""Stage `rewards`: the reward table of the rollouts, one row per episode with every component
(data/rewards/rewards.csv), and its summary (data/rewards/summary.json)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from easy_core.core.datasets import read_trajectories
from easy_core.core.reward import reward_rows, reward_summary, write_reward_table
from easy_core.core.storage import write_json
from flows.settings import publish_markdown


@flow(name="rewards", log_prints=True)
def rewards_flow(rollouts_dir: str = "data/rollouts", out_dir: str = "data/rewards") -> dict:
    rows = reward_rows(read_trajectories(rollouts_dir))
    write_reward_table(Path(out_dir) / "rewards.csv", rows)
    summary = reward_summary(rows)
    write_json(Path(out_dir) / "summary.json", summary)
    table = "\n".join(f"| {k} | {v:.4f} |" for k, v in summary.items() if isinstance(v, float))
    publish_markdown("reward-summary", f"| component | mean |\n|---|---|\n{table}\n")
    print(summary)
    return summary


if __name__ == "__main__":
    rewards_flow()
