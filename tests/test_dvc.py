"""`dvc repro` on a fresh copy of the repository: every stage runs once, a second repro does
nothing, and changing one stage's param re-runs only that stage (and what follows it)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import ROOT
from tests.test_flows import SMALL

BIN = Path(sys.executable).parent
STAGES = ["profile", "sft_data", "rollouts", "train", "policies", "evaluate"]
AFTER = [
    ("profile", "sft_data"),
    ("profile", "rollouts"),
    ("profile", "policies"),
    ("sft_data", "train"),
    ("rollouts", "train"),
    ("train", "evaluate"),
    ("policies", "evaluate"),
]


def tracked_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return [line for line in out.stdout.splitlines() if (ROOT / line).is_file()]


def repro(repo: Path, env: dict) -> list[str]:
    done = subprocess.run(
        [str(BIN / "dvc"), "repro"], cwd=repo, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return re.findall(r"Running stage '(\w+)'", done.stdout)


def test_dvc_repro_runs_once_then_only_what_changed(tmp_path):
    repo = tmp_path / "repo"
    for name in tracked_files():
        target = repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    for section, values in SMALL.items():
        params[section].update(values)
    # This test is about what re-runs, not what is measured: one pool, and no episodes of the
    # trained orchestrator (dvc.yaml's deps still tie evaluate to models/), keep every stage
    # and dependency while the four evaluations stay short; the pipeline flow's test
    # evaluates both checkpoints on both pools.
    params["evaluate"]["pools"] = params["evaluate"]["pools"][:1]
    params["evaluate"]["orchestrator_n"] = 0
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com"]
    for cmd in (
        ["git", "init", "-q"],
        ["git", "add", "-A"],
        [*git, "commit", "-qm", "fresh clone"],
    ):
        subprocess.run(cmd, cwd=repo, check=True, capture_output=True)
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    }
    env.pop("PREFECT_API_URL", None)

    first = repro(repo, env)
    # dvc orders stages that do not depend on each other as it likes (it differed between two
    # machines): each stage runs once, and after every stage it reads from.
    assert sorted(first) == sorted(STAGES)
    for before, after in AFTER:
        assert first.index(before) < first.index(after), (before, after, first)
    assert (repo / "results/metrics.json").is_file() and (repo / "results/pareto.png").is_file()
    assert repro(repo, env) == []

    params["evaluate"]["n"] = 12
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    assert repro(repo, env) == ["evaluate"]

    params["sft"]["learning_rate"] *= 2  # a training param: training, and the evaluation of
    (repo / "params.yaml").write_text(yaml.safe_dump(params))  # the orchestrator it trained
    assert repro(repo, env) == ["train", "evaluate"]

    params["policy_training"]["epochs"] += 1  # the learned policies' training, and evaluate
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    assert repro(repo, env) == ["policies", "evaluate"]
