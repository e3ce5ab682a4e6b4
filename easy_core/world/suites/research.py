"""The `research` suite: multi-hop questions over the seeded fictional world of
`easy_core.corpora` (corpus `world-<seed>`), each needing two or three retrievals and a synthesis.

Question kinds: "In which city was the founder of X born?" (founder, then birthplace) and
"In which country was the founder of X born?" (founder, birthplace, then the city's country).
Companies are split between train and test by a seeded shuffle, so test questions are about
companies never asked about in training. Graded by exact match and token F1 (SQuAD-style).
"""

from __future__ import annotations

from collections.abc import Iterator

from easy_core.core.schemas import Subtask, Task
from easy_core.world.corpora import fictional_world
from easy_core.world.suites.answers import exact_match, final_line, token_f1
from easy_core.world.suites.splits import checked_split, list_split

TRAIN_SHARE = 0.7
SYNTHESIS = (
    "Answer the question from the retrieved documents in the data section. Question: {q} "
    "Reply with the name only, on one line starting with 'Answer:'."
)


def _lookup(sub_id: str, text: str, gold: str, deps: list[str], difficulty: int) -> Subtask:
    return Subtask(
        id=sub_id,
        skill="lookup",
        difficulty=difficulty,
        input_tokens=40,
        output_tokens=100,
        depends_on=deps,
        gold=gold,
        instruction=text,
    )


class ResearchSuite:
    name = "research"

    def tasks(self, split: str, n: int, seed: int, start: int = 0) -> Iterator[Task]:
        world = fictional_world(seed)
        checked_split(self.name, split)
        pool = list_split(list(world.companies), f"research-split|{seed}", TRAIN_SHARE, split)
        for index in range(start, start + n):
            company = pool[index % len(pool)]
            three_hops = (index // len(pool) + index) % 2 == 1
            founder = world.person(company.founder)
            city = world.city(founder.born_in)
            subtasks = [
                _lookup("t1", f"Who founded {company.name}?", founder.name, [], 2),
                _lookup(
                    "t2", f"Where was the founder of {company.name} born?", city.name, ["t1"], 3
                ),
            ]
            if three_hops:
                question = f"In which country was the founder of {company.name} born?"
                subtasks.append(
                    _lookup(
                        "t3",
                        f"In which country is the city where the founder of {company.name} "
                        "was born?",
                        city.country,
                        ["t2"],
                        3,
                    )
                )
                answer = city.country
            else:
                question = f"In which city was the founder of {company.name} born?"
                answer = city.name
            deps = [sub.id for sub in subtasks]
            subtasks.append(
                Subtask(
                    id=f"t{len(subtasks) + 1}",
                    skill="writing",
                    difficulty=2,
                    input_tokens=250,
                    output_tokens=16,
                    depends_on=deps,
                    gold=answer,
                    instruction=SYNTHESIS.format(q=question),
                )
            )
            yield Task(
                id=f"research-{split}-{seed}-{index:06d}",
                suite=self.name,
                split=split,  # type: ignore[arg-type]
                family="3-hop" if three_hops else "2-hop",
                prompt=f"{question} Use the document collection world-{seed}.",
                answer=answer,
                subtasks=subtasks,
                budget_usd=0.01,
                budget_s=600.0,
                metadata={"corpus": f"world-{seed}"},
            )

    def from_question(self, question: str, seed: int = 0) -> Task:
        """A task for `easy solve`: one retrieval, then a synthesis; no gold to check against."""
        return Task(
            id="research-question",
            suite=self.name,
            split="test",
            prompt=f"{question} Use the document collection world-{seed}.",
            answer="",
            subtasks=[
                _lookup("t1", question, "", [], 3),
                Subtask(
                    id="t2",
                    skill="writing",
                    difficulty=2,
                    input_tokens=250,
                    output_tokens=16,
                    depends_on=["t1"],
                    gold="",
                    instruction=SYNTHESIS.format(q=question),
                ),
            ],
            budget_usd=0.01,
            budget_s=600.0,
            metadata={"corpus": f"world-{seed}"},
        )

    @staticmethod
    def check(task: Task, answer: str | None) -> bool:
        if not task.answer:
            return False
        return exact_match(final_line(answer), task.answer)

    @staticmethod
    def score(task: Task, answer: str | None) -> dict[str, float]:
        prediction = final_line(answer)
        return {
            "em": float(exact_match(prediction, task.answer)),
            "f1": token_f1(prediction, task.answer),
        }

    @staticmethod
    def check_subtask(task: Task, subtask: Subtask, output: str) -> bool:
        if subtask.skill == "lookup":  # the document with the fact was retrieved (or named)
            return subtask.gold.lower() in output.lower()
        return exact_match(final_line(output), subtask.gold)
