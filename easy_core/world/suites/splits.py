"""The three splits every suite has: `train` (what training sees), `validation` (what recipes,
weights, thresholds and checkpoints are chosen on) and `test` (what is reported, seen by no
choice). Generated suites draw each split from its own seed stream; suites over a fixed list
(HumanEval problems, the research world's companies) cut the list once, the validation part
from what was train, so the test part stays as it was."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

from easy_core.core.errors import ConfigError

SPLITS = ("train", "validation", "test")
VALIDATION_SHARE = 0.2  # of the non-test part of a fixed list

T = TypeVar("T")


def checked_split(suite: str, split: str) -> str:
    if split not in SPLITS:
        raise ConfigError(
            f"{suite} suite: split must be one of {', '.join(SPLITS)} (got {split!r})"
        )
    return split


def list_split(items: Sequence[T], key: str, train_share: float, split: str) -> list[T]:
    """`split`'s part of `items`, shuffled once by `key`: the last 1 - train_share is test, and
    of the rest the last VALIDATION_SHARE is validation."""
    shuffled = list(items)
    random.Random(key).shuffle(shuffled)
    cut = int(len(shuffled) * train_share)
    held = int(cut * VALIDATION_SHARE)
    parts = {
        "train": shuffled[: cut - held],
        "validation": shuffled[cut - held : cut],
        "test": shuffled[cut:],
    }
    return parts[split]
