"""Integration: S3 remote storage against a real S3-compatible server (moto) on loopback: a DVC
remote (push, wipe, pull: identical checksums) and Prefect task results persisted through s3fs."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from easy_core.benchmarks.serve_bench import free_port
from tests.conftest import ROOT

BIN = Path(sys.executable).parent
BUCKET = "easy-test"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    state = tmp_path_factory.mktemp("s3")
    env = {
        **os.environ,
        "EASY_STATE_DIR": str(state),
        "S3_PORT": str(free_port()),
        "EASY_BIN": str(BIN),
    }
    up = subprocess.run(
        [str(ROOT / "infra/local/s3-up.sh")], env=env, capture_output=True, text=True, timeout=120
    )
    assert up.returncode == 0, up.stderr
    creds = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": up.stdout.strip(),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    saved = {k: os.environ.get(k) for k in creds}
    os.environ.update(creds)
    import boto3

    boto3.client("s3").create_bucket(Bucket=BUCKET)
    yield {**env, **creds}
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    subprocess.run([str(ROOT / "infra/local/s3-down.sh")], env=env, timeout=60)


def digest_tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def run(cmd: list[str], cwd: Path, env: dict) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{cmd}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done.stdout


def test_dvc_remote_push_and_pull_round_trip(s3, tmp_path, params):
    from easy_core.learning.episode_rollouts import generate_shard

    repo = tmp_path / "repo"
    repo.mkdir()
    small = params.model_copy(
        update={
            "rollouts": params.rollouts.model_copy(
                update={"pool": str(ROOT / params.rollouts.pool), "episodes_per_shard": 15}
            )
        }
    )
    for shard in range(2):
        generate_shard(small, shard, repo / "data/rollouts")
    checkpoint = repo / "models/checkpoint"
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.safetensors").write_bytes(os.urandom(1 << 20))
    (checkpoint / "config.json").write_text('{"kind": "test checkpoint"}')

    dvc = str(BIN / "dvc")
    run(["git", "init", "-q"], repo, s3)
    run([dvc, "init", "-q"], repo, s3)
    run([dvc, "remote", "add", "-d", "storage", f"s3://{BUCKET}/dvc"], repo, s3)
    run(
        [dvc, "remote", "modify", "--local", "storage", "endpointurl", s3["AWS_ENDPOINT_URL"]],
        repo,
        s3,
    )
    run([dvc, "add", "data/rollouts", "models/checkpoint"], repo, s3)
    before = {"data": digest_tree(repo / "data/rollouts"), "model": digest_tree(checkpoint)}
    run([dvc, "push"], repo, s3)
    config = (repo / ".dvc/config").read_text()
    assert (
        "testing" not in config and "endpointurl" not in config
    )  # secrets and local settings stay local

    shutil.rmtree(repo / "data/rollouts")
    shutil.rmtree(checkpoint)
    shutil.rmtree(repo / ".dvc/cache")
    run([dvc, "pull"], repo, s3)
    assert {"data": digest_tree(repo / "data/rollouts"), "model": digest_tree(checkpoint)} == before


def test_flow_task_results_are_stored_on_s3_and_reused(s3, tmp_path):
    import s3fs
    from prefect.testing.utilities import prefect_test_harness

    from flows.rollouts import rollouts_flow

    params_file = tmp_path / "params.yaml"
    base = yaml.safe_load((ROOT / "params.yaml").read_text())
    base["pipeline"]["result_storage"] = f"s3://{BUCKET}/prefect-results"
    base["rollouts"].update(shards=2, episodes_per_shard=8, tree_tasks=0)
    params_file.write_text(yaml.safe_dump(base))
    fs = s3fs.S3FileSystem()
    with prefect_test_harness(server_startup_timeout=120):
        first = rollouts_flow(str(params_file), out_dir=str(tmp_path / "rollouts"))
        stored = set(fs.find(f"{BUCKET}/prefect-results"))
        assert len(stored) == 2
        shutil.rmtree(tmp_path / "rollouts")  # the cached results must not need the files
        second = rollouts_flow(str(params_file), out_dir=str(tmp_path / "rollouts"))
    assert second == first
    assert set(fs.find(f"{BUCKET}/prefect-results")) == stored
