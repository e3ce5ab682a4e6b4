"""Stage `policies`: execution traces of the sim suite (data/traces/traces.parquet) and the
learned policies trained from them (models/progress.npz, models/graph.pt), with held-out
calibration figures in results/policies.json, published as a Prefect artifact."""

from __future__ import annotations

from prefect import flow

from easy_core.learning.policy_training import train_policies
from flows.settings import params_from, publish_markdown


@flow(name="policies", log_prints=True)
def policies_flow(params_path: str | None = None) -> dict:
    params = params_from(params_path)
    report = train_policies(
        params,
        traces_path="data/traces/traces.parquet",
        report_path="results/policies.json",
    )
    lines = ["| policy | figure | value |", "|---|---|---|"]
    for policy in ("progress", "graph"):
        for key, value in report.get(policy, {}).items():
            lines.append(f"| {policy} | {key} | {value:.4f} |")
    publish_markdown("policy-training", "\n".join(lines) + "\n")
    print({k: v for k, v in report.items() if not isinstance(v, dict)})
    return report


if __name__ == "__main__":
    policies_flow()
