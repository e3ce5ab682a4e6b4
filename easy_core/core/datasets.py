"""Datasets written as shards: each shard atomically (temporary file, then rename) with its
checksum in a manifest, so an interrupted run keeps every finished shard and a re-run skips them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from easy_core.core.errors import ConfigError
from easy_core.core.schemas import Record, Trajectory
from easy_core.core.storage import atomic_write_text, write_json

MANIFEST = "manifest.json"


class ShardInfo(BaseModel):
    shard: int
    path: str
    records: int
    sha256: str


class Manifest(Record):
    kind: str
    config_hash: str = ""
    shards: list[ShardInfo] = []


def config_hash(config: object) -> str:
    """A stable hash of the settings that determine a dataset (a pydantic model or JSON data)."""
    data = to_jsonable_python(config)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def shard_name(shard: int) -> str:
    return f"shard-{shard:05d}.jsonl"


def shard_text(records: Iterable[BaseModel]) -> str:
    return "".join(record.model_dump_json() + "\n" for record in records)


def write_shard(directory: str | Path, shard: int, records: Iterable[BaseModel] | str) -> ShardInfo:
    """Write one shard (records, or their JSONL text) atomically; return its manifest entry."""
    text = records if isinstance(records, str) else shard_text(records)
    path = atomic_write_text(Path(directory) / shard_name(shard), text)
    return ShardInfo(
        shard=shard,
        path=path.name,
        records=text.count("\n"),
        sha256=hashlib.sha256(text.encode()).hexdigest(),
    )


def shard_is_complete(directory: str | Path, info: ShardInfo) -> bool:
    path = Path(directory) / info.path
    return path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == info.sha256


def _sidecar(directory: Path, shard: int) -> Path:
    return directory / (shard_name(shard) + ".info.json")


def finished_shard_file(directory: str | Path, shard: int, settings_hash: str) -> ShardInfo | None:
    """The shard's entry if it was finished with the same settings and its file is intact."""
    sidecar = _sidecar(Path(directory), shard)
    if not sidecar.is_file():
        return None
    recorded = json.loads(sidecar.read_text())
    info = ShardInfo.model_validate(recorded["shard"])
    if recorded.get("config_hash") == settings_hash and shard_is_complete(directory, info):
        return info
    return None


def store_shard_file(directory: str | Path, shard: int, text: str, settings_hash: str) -> ShardInfo:
    """Write the shard file atomically, then its sidecar, which marks it finished."""
    info = write_shard(directory, shard, text)
    write_json(
        _sidecar(Path(directory), shard), {"config_hash": settings_hash, "shard": info.model_dump()}
    )
    return info


def remove_partial_files(directory: str | Path) -> int:
    """Delete temporary files a killed writer left behind (finished files are never partial:
    they appear by rename). Returns how many were removed."""
    removed = 0
    for path in Path(directory).glob(".*.tmp"):
        path.unlink(missing_ok=True)
        removed += 1
    return removed


def write_manifest(directory: str | Path, manifest: Manifest) -> Path:
    manifest.shards.sort(key=lambda s: s.shard)
    return write_json(Path(directory) / MANIFEST, manifest)


def read_manifest(directory: str | Path) -> Manifest | None:
    path = Path(directory) / MANIFEST
    if not path.is_file():
        return None
    return Manifest.model_validate_json(path.read_text())


def read_trajectories(directory: str | Path) -> Iterator[Trajectory]:
    """Every trajectory of a sharded dataset, in shard order; checks each shard's checksum."""
    manifest = read_manifest(directory)
    if manifest is None:
        raise ConfigError(f"{directory}: no {MANIFEST}; generate the dataset first")
    for info in manifest.shards:
        if not shard_is_complete(directory, info):
            raise ConfigError(f"{directory}/{info.path}: missing or changed (checksum mismatch)")
        with open(Path(directory) / info.path, encoding="utf-8") as handle:
            for line in handle:
                yield Trajectory.model_validate_json(line)
