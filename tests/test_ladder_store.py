"""The CPU ladder's recorded outcomes ship with the repo: `pipelines/ladder/dvc.lock` names
them and the `ladder` DVC remote (`data/ladder-store`, tracked by git) holds them, so a clean
checkout gets them with `dvc pull -r ladder` instead of hours of recording. Pulled into a bare
copy of the pipeline, every locked recording comes back whole and is replayable data."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from easy_core.executors.replay import read_records

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "pipelines" / "ladder" / "dvc.lock"
LADDER_EXECUTORS = {"smollm2-135m", "qwen-coder-0.5b", "qwen-coder-1.5b"}


def _locked_outs() -> dict[str, str]:
    """out path -> its locked directory hash, for every recorded stage of the lock."""
    stages = yaml.safe_load(LOCK.read_text())["stages"]
    return {
        out["path"]: out["md5"]
        for name, stage in stages.items()
        if name.startswith("record-")
        for out in stage["outs"]
    }


def test_every_locked_recording_is_in_the_store():
    """A lock updated without `dvc push -r ladder` would leave a clean checkout with nothing to
    pull: each locked directory and every file it lists must be in the git-tracked store."""
    store = ROOT / "data" / "ladder-store" / "files" / "md5"
    outs = _locked_outs()
    assert outs, "pipelines/ladder/dvc.lock locks no recording"
    for path, digest in outs.items():
        listing = store / digest[:2] / digest[2:]
        assert listing.is_file(), f"{path}: {digest} is not in the store (dvc push -r ladder)"
        entries = yaml.safe_load(listing.read_text())  # a JSON list, which YAML reads too
        missing = [
            e["relpath"] for e in entries if not (store / e["md5"][:2] / e["md5"][2:]).is_file()
        ]
        assert not missing, f"{path}: files not in data/ladder-store: {missing}"


def test_dvc_pull_restores_the_recordings(tmp_path):
    """`dvc pull -r ladder` in a checkout without them (a bare copy of the pipeline and the
    store) writes every locked recording, and its rows are real outcomes of the ladder."""
    for rel in (".dvc/config", "pipelines/ladder/dvc.yaml", "pipelines/ladder/dvc.lock"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "ladder-store").symlink_to(ROOT / "data" / "ladder-store")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    dvc = str(Path(sys.executable).with_name("dvc"))
    stages = [f"pipelines/ladder/dvc.yaml:{name}" for name in _recorded_stages()]
    done = subprocess.run(
        [dvc, "pull", "-r", "ladder", *stages], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    for path in _locked_outs():
        rows = list(read_records(tmp_path / path))
        assert rows, path
        assert {r.executor for r in rows} >= LADDER_EXECUTORS, path
        # real outcomes: some right, some wrong (a store of all-wrong rows is a broken recording)
        assert 0 < sum(r.correct for r in rows) < len(rows), path


def _recorded_stages() -> list[str]:
    return [n for n in yaml.safe_load(LOCK.read_text())["stages"] if n.startswith("record-")]
