"""The `math` suite: procedural reasoning problems from reasoning-gym, graded by reasoning-gym's
own scorer. Task i of a split takes generator `GENERATORS[i % 5]`; train and test use different
generator seeds, so no problem appears in both.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from easy_core.core.errors import ConfigError
from easy_core.core.schemas import Subtask, Task
from easy_core.world.suites.answers import final_line
from easy_core.world.suites.splits import checked_split

# generator -> difficulty 1..5 (how hard it is for a small model)
GENERATORS = {
    "basic_arithmetic": 1,
    "chain_sum": 1,
    "leg_counting": 2,
    "simple_equations": 3,
    "gsm_symbolic": 4,
}
_HOW_TO_ANSWER = (
    "\nThink step by step briefly, then give the final answer alone on the last line, starting "
    "with 'Answer:'."
)
INSTRUCTION = "{question}" + _HOW_TO_ANSWER


def question_of(instruction: str) -> str:
    """The problem a math step's instruction asks about, without how to answer it."""
    return instruction.removesuffix(_HOW_TO_ANSWER)


_SIZE = 100_000  # reasoning-gym datasets are lazy: an entry depends on (seed, index) only


def _generator_seed(seed: int, split: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"math|{seed}|{split}".encode(), digest_size=4).digest())


@lru_cache(maxsize=32)
def _dataset(name: str, seed: int) -> Any:
    try:
        import reasoning_gym
    except ImportError:
        raise ConfigError("the math suite needs reasoning-gym: pip install -e '.[real]'") from None
    return reasoning_gym.create_dataset(name, seed=seed, size=_SIZE)


def _entry(task: Task) -> tuple[Any, dict[str, Any]]:
    meta = task.metadata
    dataset = _dataset(meta["generator"], meta["generator_seed"])
    return dataset, dataset[meta["entry"]]


class MathSuite:
    name = "math"

    def tasks(self, split: str, n: int, seed: int, start: int = 0) -> Iterator[Task]:
        checked_split(self.name, split)
        names = list(GENERATORS)
        generator_seed = _generator_seed(seed, split)
        for index in range(start, start + n):
            name = names[index % len(names)]
            entry_index = index // len(names)
            entry = _dataset(name, generator_seed)[entry_index]
            question = entry["question"]
            yield Task(
                id=f"math-{split}-{seed}-{index:06d}",
                suite=self.name,
                split=split,  # type: ignore[arg-type]
                family=name,
                prompt=question,
                answer=str(entry["answer"]),
                subtasks=[
                    Subtask(
                        id="t1",
                        skill="math",
                        difficulty=GENERATORS[name],
                        input_tokens=len(question) // 4 + 40,
                        output_tokens=120,
                        gold=str(entry["answer"]),
                        instruction=INSTRUCTION.format(question=question),
                    )
                ],
                budget_usd=0.01,
                budget_s=300.0,
                metadata={
                    "generator": name,
                    "generator_seed": generator_seed,
                    "entry": entry_index,
                },
            )

    def from_question(self, question: str) -> Task:
        """A task for `easy solve`: no generator entry, so no gold to check against."""
        return Task(
            id="math-question",
            suite=self.name,
            split="test",
            prompt=question,
            answer="",
            subtasks=[
                Subtask(
                    id="t1",
                    skill="math",
                    difficulty=3,
                    input_tokens=len(question) // 4 + 40,
                    output_tokens=120,
                    gold="",
                    instruction=INSTRUCTION.format(question=question),
                )
            ],
            budget_usd=0.01,
            budget_s=300.0,
        )

    @staticmethod
    def score(task: Task, answer: str | None) -> dict[str, float]:
        if "generator" not in task.metadata:
            return {}
        dataset, entry = _entry(task)
        return {"score": float(dataset.score_answer(final_line(answer), entry))}

    @classmethod
    def check(cls, task: Task, answer: str | None) -> bool:
        return cls.score(task, answer).get("score", 0.0) >= 1.0

    @classmethod
    def check_subtask(cls, task: Task, subtask: Subtask, output: str) -> bool:
        return cls.check(task, output)
