"""Task sources with checkers. Each suite yields `Task` objects with a seeded train/test split."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from easy_core.errors import ConfigError
from easy_core.params import Params
from easy_core.schemas import Task
from easy_core.suites.sim import SimSuite


class Suite(Protocol):
    name: str

    def tasks(self, split: str, n: int, seed: int, start: int = 0) -> Iterator[Task]: ...

    def check(self, task: Task, answer: str | None) -> bool: ...


SUITES = {"sim": lambda params: SimSuite(params.sim)}


def get_suite(name: str, params: Params) -> Suite:
    factory = SUITES.get(name)
    if factory is None:
        raise ConfigError(f"unknown suite {name!r}; available: {', '.join(sorted(SUITES))}")
    return factory(params)
