"""Task sources with checkers. Each suite yields `Task` objects of a seeded train, validation or
test split (`splits`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from easy_core.core.errors import ConfigError
from easy_core.core.params import Params
from easy_core.core.schemas import Task
from easy_core.world.suites.sim import SimSuite


class Suite(Protocol):
    name: str

    def tasks(self, split: str, n: int, seed: int, start: int = 0) -> Iterator[Task]: ...

    def check(self, task: Task, answer: str | None) -> bool: ...

    # Real suites also define `score(task, answer) -> dict[str, float]` (graded scores such as
    # F1, averaged into EvalMetrics.suite_scores) and `check_subtask(task, subtask, output)`
    # (whether one step's output solved one subtask: what profiling measures).


def _embodied(params: Params) -> Suite:
    from easy_core.world.suites.embodied import EmbodiedSuite  # textworld loads on use

    return EmbodiedSuite()


def _math(params: Params) -> Suite:
    from easy_core.world.suites.math import MathSuite

    return MathSuite()


def _compound_math(params: Params) -> Suite:
    from easy_core.world.suites.compound_math import CompoundMathSuite

    return CompoundMathSuite()


def _research(params: Params) -> Suite:
    from easy_core.world.suites.research import ResearchSuite

    return ResearchSuite()


def _code(params: Params) -> Suite:
    from easy_core.world.suites.code import CodeSuite

    return CodeSuite()


SUITES = {
    "sim": lambda params: SimSuite(params.sim),
    "math": _math,
    "math-compound": _compound_math,
    "research": _research,
    "code": _code,
    "embodied": _embodied,
}


def get_suite(name: str, params: Params) -> Suite:
    factory = SUITES.get(name)
    if factory is None:
        raise ConfigError(f"unknown suite {name!r}; available: {', '.join(sorted(SUITES))}")
    return factory(params)
