"""Writing results so that nothing is half-written: temporary file in the same folder, fsync,
then an atomic rename."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel


def atomic_write_text(path: str | Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_jsonl(path: str | Path, records: Iterable[BaseModel]) -> Path:
    return atomic_write_text(path, "".join(record.model_dump_json() + "\n" for record in records))


def write_json(path: str | Path, record: BaseModel | dict) -> Path:
    data = record.model_dump(mode="json") if isinstance(record, BaseModel) else record
    return atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
