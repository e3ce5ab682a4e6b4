"""The `math-compound` suite: each task is 3 to 6 reasoning-gym problems of mixed generators and
difficulties, solved as independent subtasks (they can run in parallel, each on the executor
that suits it) and combined by a final step into one answer line. Checked per part (each by
reasoning-gym's own scorer) and whole (every part right, in order).

Parts come from the `math` suite's generators and generator seeds, at entries of their own
(`_PART_OFFSET` onwards), so a compound task never repeats a single-question `math` task of the
same split.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from typing import Any

from easy_core.core.errors import ConfigError
from easy_core.core.schemas import Subtask, Task
from easy_core.world.suites.answers import final_line
from easy_core.world.suites.math import GENERATORS, INSTRUCTION, _dataset, _generator_seed
from easy_core.world.suites.splits import checked_split

MIN_PARTS, MAX_PARTS = 3, 6
_PART_OFFSET = 50_000  # entries below are the math suite's
SEPARATOR = "; "
COMBINE = (
    "Combine the results of the parts, in order, into one line: 'Answer: r1; r2; ...' where "
    "r1 is part 1's final answer, and so on. Write nothing else."
)


_PART_MARK = re.compile(r"\bPart\s*\d+\s*:", re.IGNORECASE)


def question_parts(question: str) -> list[str]:
    """The parts of a person's compound question: marked `Part 1: ... Part 2: ...` (on one
    line or several), else one per non-empty line."""
    marked = _PART_MARK.search(question) is not None
    parts = _PART_MARK.split(question)[1:] if marked else question.splitlines()
    return [part.strip() for part in parts if part.strip()]


def _draw(key: str, modulo: int) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=4).digest()) % modulo


def split_answer(answer: str | None) -> list[str]:
    """The parts of a compound answer line (`Answer: 4; 17; x=3`)."""
    line = final_line(answer)
    return [part.strip() for part in line.split(SEPARATOR.strip())] if line else []


class CompoundMathSuite:
    name = "math-compound"

    def tasks(self, split: str, n: int, seed: int, start: int = 0) -> Iterator[Task]:
        checked_split(self.name, split)
        generator_seed = _generator_seed(seed, split)
        names = list(GENERATORS)
        for index in range(start, start + n):
            key = f"{seed}|{split}|{index}"
            k = MIN_PARTS + _draw(key + "|k", MAX_PARTS - MIN_PARTS + 1)
            first = _draw(key + "|first", len(names))
            parts = []
            for j in range(k):
                # mixed generators: consecutive parts step through the generator list
                name = names[(first + j) % len(names)]
                entry = _PART_OFFSET + index * MAX_PARTS + j
                parts.append((name, entry, _dataset(name, generator_seed)[entry]))
            yield self._task(split, seed, index, generator_seed, parts)

    def from_question(self, question: str) -> Task:
        """A task for `easy solve` from a person's parts (no gold: nothing to check against)."""
        parts = question_parts(question)
        if not MIN_PARTS - 1 <= len(parts) <= MAX_PARTS:
            raise ConfigError(
                f"a compound question has 2 to {MAX_PARTS} parts, marked 'Part 1: ... Part 2: "
                f"...' or one per line; found {len(parts)}"
            )
        return self._task(
            "test", 0, 0, 0, [("", 0, {"question": p, "answer": ""}) for p in parts], difficulty=3
        ).model_copy(update={"id": "math-compound-question", "answer": "", "metadata": {}})

    @staticmethod
    def question_of(task: Task) -> str:
        """The task as a person would ask it (`Part 1: ...` lines), which `from_question` turns
        back into the same parts: what a load test sends to `easy serve`."""
        body = task.prompt.split("\n", 1)[1]  # after "Solve every part."
        return body.rsplit("\nAnswer with all results", 1)[0]

    def _task(
        self,
        split: str,
        seed: int,
        index: int,
        generator_seed: int,
        parts: list[tuple[str, int, dict[str, Any]]],
        difficulty: int | None = None,
    ) -> Task:
        subtasks = [
            Subtask(
                id=f"t{j + 1}",
                skill="math",
                difficulty=difficulty or GENERATORS[name],
                input_tokens=len(entry["question"]) // 4 + 40,
                output_tokens=120,
                gold=str(entry["answer"]),
                instruction=INSTRUCTION.format(question=entry["question"]),
            )
            for j, (name, _, entry) in enumerate(parts)
        ]
        combined = SEPARATOR.join(sub.gold for sub in subtasks)
        subtasks.append(
            Subtask(
                id=f"t{len(parts) + 1}",
                skill="writing",
                difficulty=1,
                input_tokens=40 + 20 * len(parts),
                output_tokens=10 + 8 * len(parts),
                depends_on=[sub.id for sub in subtasks],
                gold=combined,
                instruction=COMBINE,
            )
        )
        questions = "\n".join(
            f"Part {j + 1}: {entry['question']}" for j, (_, _, entry) in enumerate(parts)
        )
        return Task(
            id=f"math-compound-{split}-{seed}-{index:06d}",
            suite=self.name,
            split=split,  # type: ignore[arg-type]
            family=f"{len(parts)}-parts",
            prompt=(
                f"Solve every part.\n{questions}\nAnswer with all results on the last line, in "
                "order: 'Answer: r1; r2; ...'."
            ),
            answer=combined,
            subtasks=subtasks,
            budget_usd=0.01 * (len(parts) + 1),
            budget_s=300.0 * (len(parts) + 1),
            metadata={
                "generator_seed": generator_seed,
                "parts": [[name, entry_index] for name, entry_index, _ in parts],
            },
        )

    @staticmethod
    def _part_right(task: Task, j: int, answer: str | None) -> bool:
        name, entry_index = task.metadata["parts"][j]
        dataset = _dataset(name, task.metadata["generator_seed"])
        return float(dataset.score_answer(answer, dataset[entry_index])) >= 1.0

    @classmethod
    def score(cls, task: Task, answer: str | None) -> dict[str, float]:
        """`parts`: the share of parts answered right, in place; `all`: every part right.
        A person's question has no gold: nothing to score."""
        if "parts" not in task.metadata:
            return {}
        given = split_answer(answer)
        count = len(task.metadata["parts"])
        right = sum(cls._part_right(task, j, given[j]) for j in range(min(count, len(given))))
        return {"parts": right / count, "all": float(right == count and len(given) == count)}

    @classmethod
    def check(cls, task: Task, answer: str | None) -> bool:
        return cls.score(task, answer).get("all", 0.0) >= 1.0

    @classmethod
    def check_subtask(cls, task: Task, subtask: Subtask, output: str) -> bool:
        """A part by its own scorer; the combining step by the whole check."""
        j = int(subtask.id[1:]) - 1
        if "parts" not in task.metadata:  # a person's question: no gold
            return False
        if j < len(task.metadata["parts"]):
            return cls._part_right(task, j, final_line(output))
        return cls.check(task, output)
