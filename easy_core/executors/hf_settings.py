"""Settings of the in-process `hf` backend (params.yaml `executors:`), apart from the backend
itself so that building a pool does not import torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HFSettings:
    threads: int = 2
    batch_size: int = 4
    batch_window_s: float = 0.02  # how long the first request of a batch waits for companions
