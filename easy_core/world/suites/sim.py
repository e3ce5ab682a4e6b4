"""The `sim` suite: tasks that are attributed DAGs of latent subtasks, from a seeded generator.

Families: `chain` (a pipeline), `fanout` (one source, a wide layer, one merge), `diamond`
(stacked diamonds), `mixed` (a random layered DAG with mixed skills). Every task has exactly one
sink subtask; the task's answer is the sink's gold sub-answer, which a policy can only produce
correctly if every subtask upstream of it was solved and passed along.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Iterator

from easy_core.core.params import SimParams
from easy_core.core.schemas import Subtask, Task
from easy_core.world.suites.splits import checked_split

SKILLS = ("arithmetic", "logic", "code", "lookup", "writing")
FAMILIES = ("chain", "fanout", "diamond", "mixed")
REFERENCE_TOKENS_PER_S = 40.0
REFERENCE_TTFT_S = 0.5
TASK_ID = re.compile(r"\bsim-(train|validation|test)-(\d{1,9})-(\d{1,9})\b")


def _layers(family: str, rng: random.Random) -> list[list[int]]:
    """Prerequisite lists (as indexes) for each subtask, in topological order."""
    if family == "chain":
        n = rng.randint(3, 6)
        return [[]] + [[i - 1] for i in range(1, n)]
    if family == "fanout":
        width = rng.randint(4, 8)
        return [[]] + [[0] for _ in range(width)] + [list(range(1, width + 1))]
    if family == "diamond":
        deps: list[list[int]] = [[]]
        top = 0
        for _ in range(rng.randint(1, 2)):
            left, right = len(deps), len(deps) + 1
            deps += [[top], [top], [left, right]]
            top = left + 2
        return deps
    # mixed: random layered DAG, every node reaches the single sink
    n_layers = rng.randint(2, 4)
    deps, previous = [], []
    for _ in range(n_layers):
        layer = []
        for _ in range(rng.randint(1, 3)):
            parents = (
                rng.sample(previous, k=min(len(previous), rng.randint(1, 2))) if previous else []
            )
            layer.append(len(deps))
            deps.append(sorted(parents))
        previous = layer
    has_child = {p for parents in deps for p in parents}
    deps.append([i for i in range(len(deps)) if i not in has_child])
    return deps


def generate_task(seed: int, split: str, index: int, params: SimParams | None = None) -> Task:
    params = params or SimParams()
    key = f"sim|{seed}|{split}|{index}"
    rng = random.Random(hashlib.blake2b(key.encode(), digest_size=8).digest())
    held_out = split in ("test", "validation")  # every family in turn, as reported
    family = FAMILIES[index % len(FAMILIES)] if held_out else rng.choice(FAMILIES)
    deps = _layers(family, rng)
    main_skill = rng.choice(SKILLS)
    subtasks = []
    for i, prereqs in enumerate(deps):
        skill = rng.choice(SKILLS) if family == "mixed" or rng.random() < 0.35 else main_skill
        subtasks.append(
            Subtask(
                id=f"t{i + 1}",
                skill=skill,
                difficulty=rng.randint(1, 5),
                input_tokens=rng.randint(80, 600),
                output_tokens=rng.randint(40, 300),
                depends_on=[f"t{p + 1}" for p in prereqs],
                gold=f"{rng.getrandbits(32):08x}",
            )
        )
    task_id = f"sim-{split}-{seed}-{index:06d}"
    return Task(
        id=task_id,
        suite="sim",
        split=split,  # type: ignore[arg-type]
        family=family,
        prompt=render_prompt(task_id, family, subtasks),
        answer=subtasks[-1].gold,
        subtasks=subtasks,
        budget_usd=_budget_usd(subtasks, params),
        budget_s=_budget_s(subtasks, params),
    )


def render_prompt(task_id: str, family: str, subtasks: list[Subtask]) -> str:
    lines = [
        f"Task {task_id} ({family}). Solve every subtask; the answer is the result of "
        f"{subtasks[-1].id}. A subtask needs the results of the subtasks it lists.",
    ]
    for sub in subtasks:
        needs = ", ".join(sub.depends_on) or "-"
        lines.append(
            f"{sub.id} [skill={sub.skill}, difficulty={sub.difficulty}/5, "
            f"in={sub.input_tokens} tok, out={sub.output_tokens} tok] needs: {needs}"
        )
    return "\n".join(lines)


def _budget_usd(subtasks: list[Subtask], params: SimParams) -> float:
    by_id = {sub.id: sub for sub in subtasks}
    tokens = sum(
        sub.input_tokens + sub.output_tokens + sum(by_id[d].output_tokens for d in sub.depends_on)
        for sub in subtasks
    )
    return tokens * params.budget_usd_per_1m_tokens / 1e6


def _budget_s(subtasks: list[Subtask], params: SimParams) -> float:
    finish: dict[str, float] = {}
    for sub in subtasks:
        start = max((finish[d] for d in sub.depends_on), default=0.0)
        finish[sub.id] = start + REFERENCE_TTFT_S + sub.output_tokens / REFERENCE_TOKENS_PER_S
    return params.budget_time_factor * max(finish.values())


class SimSuite:
    name = "sim"

    def __init__(self, params: SimParams | None = None):
        self.params = params or SimParams()

    def tasks(self, split: str, n: int, seed: int, start: int = 0) -> Iterator[Task]:
        """Tasks `start` .. `start + n - 1` of `split`; each split draws from its own seed
        stream, and a task depends only on (seed, split, index), so shards can be made apart."""
        checked_split(self.name, split)
        for index in range(start, start + n):
            yield generate_task(seed, split, index, self.params)

    def from_question(self, question: str) -> Task:
        """A task for a question (`easy solve`, `easy serve`): the generated task a question
        names by its id (`sim-test-0-000012`, as every rendered sim prompt begins), else a task
        drawn from a hash of the question, so the same question is the same task."""
        named = TASK_ID.search(question)
        if named is not None:
            split, seed, index = named.group(1), int(named.group(2)), int(named.group(3))
            return generate_task(seed, split, index, self.params)
        digest = hashlib.blake2b(question.encode(), digest_size=4).digest()
        return generate_task(int.from_bytes(digest, "big"), "test", 0, self.params)

    @staticmethod
    def check(task: Task, answer: str | None) -> bool:
        return answer is not None and answer.strip() == task.answer
