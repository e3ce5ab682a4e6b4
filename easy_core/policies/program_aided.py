"""The `program` policy (program-aided reasoning, as PAL and Program-of-Thoughts do it): a math
subtask becomes two steps, a program written by an LLM chosen for its code skill and the
`python` tool running it, whose printed value is the subtask's result. Small models get
arithmetic wrong and programs right: exact arithmetic comes from the interpreter.

A code subtask whose stub shows examples in its docstring is written by the same cheapest
capable coder, and the python tool runs the examples against the function it wrote (a test
step; `example_tests`). Code that fails them is rewritten in the next milestone by another
writer told what the examples printed (and shown the failed code when
`policies.repair_shows_code`: self-debugging with visible tests); once no untried writer is
left, the last candidate is the answer.

Other subtasks are `greedy`'s. A program that fails (it raised, or printed nothing) is rewritten
in the next milestone by another writer, told the error; once every useful writer has failed,
the subtask is solved directly by the executor `greedy` would give it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from easy_core.core.errors import PolicyError
from easy_core.core.schemas import Plan, Step, StepResult, Subtask
from easy_core.policies.baselines import (
    USELESS_BELOW,
    GreedyPolicy,
    cheapest_capable,
    downstream,
    estimates,
    latest_results,
    subtask_options,
)
from easy_core.policies.example_tests import example_tests
from easy_core.runtime.policy import EpisodeState, PoolView
from easy_core.world.suites.math import question_of

PROGRAM_SKILLS = frozenset({"math"})
TESTED_SKILLS = frozenset({"code"})
# The problem first, then the contract; no worked example: small models copy an example's
# program instead of writing the problem's own (docs/BENCHMARKS.md, "Program-aided reasoning").
PROGRAM_INSTRUCTION = (
    "Problem:\n{question}\n\nWrite a Python program that computes the answer to this problem "
    "exactly: assign each quantity the problem gives to a variable, compute the answer, and end "
    "with print(answer), a whole number printed without a decimal point. Reply with the program "
    "alone in one ```python block."
)
RETRY_NOTE = "\n\nAn earlier program for this problem failed: {error}\nWrite a corrected one."
MAX_ERROR_CHARS = 300
REPAIR_NOTE = (
    "\n\nAn earlier solution failed the examples in the docstring.\n{code}\nWhat running the "
    "examples printed:\n{report}\nWrite a corrected function."
)
FRESH_NOTE = (
    "\n\nAn earlier solution failed the examples in the docstring. What running them "
    "printed:\n{report}\nWrite a correct function."
)
MAX_CODE_CHARS = 2000


def python_tool(pool: PoolView) -> str:
    for profile in pool.profiles:
        if profile.backend == "tool" and profile.model == "python":
            return profile.name
    raise PolicyError(
        f"policy 'program' runs programs on the python tool; pool {pool.name!r} has none "
        "(add an executor with backend: tool, model: python)"
    )


def program_instruction(sub: Subtask, error: str | None = None) -> str:
    text = PROGRAM_INSTRUCTION.format(question=question_of(sub.instruction or sub.id))
    if error:
        text += RETRY_NOTE.format(error=error[:MAX_ERROR_CHARS])
    return text


class ProgramAidedPolicy(GreedyPolicy):
    name = "program"

    async def act(self, state: EpisodeState) -> Plan:
        if state.milestones and state.milestones_left > 0:
            task = state.task
            python = python_tool(state.pool)
            latest = latest_results(state)
            failed = [sub.id for sub in task.subtasks if self._failed(state, sub, latest, python)]
            if failed:
                affected = downstream(task, set(failed))
                redo = [sub.id for sub in task.subtasks if sub.id in affected]
                tried = {sub.id: [] for sub in task.subtasks}  # writers are chosen in _plan
                goal = "rewrite what failed: " + ", ".join(failed)
                return self._plan(state, redo, latest, tried, {}, goal)
        return await super().act(state)

    def _failed(
        self, state: EpisodeState, sub: Subtask, latest: dict[str, StepResult], python: str
    ) -> bool:
        """A program with no result or that printed nothing; code with no result or that
        failed its examples while an untried writer is left."""
        if sub.skill in PROGRAM_SKILLS:
            return sub.id not in latest or not latest[sub.id].output.strip()
        if sub.skill not in TESTED_SKILLS or example_tests(sub.instruction or "") is None:
            return False
        history = _test_history(state, sub.id, python)
        if sub.id in latest and history.report is None:
            return False
        return self._writer(state, sub, history.writers) is not None

    def _plan(
        self,
        state: EpisodeState,
        sub_ids: list[str],
        latest: dict[str, StepResult],
        tried: dict[str, list[str]],
        escalations: dict[str, str],
        goal: str,
    ) -> Plan:
        plan = super()._plan(state, sub_ids, latest, tried, escalations, goal)
        python = python_tool(state.pool)
        task = state.task
        steps = []
        for step in plan.steps:
            sub = task.subtask((step.covers or [""])[0])
            if sub.skill in TESTED_SKILLS and sub.id not in escalations:
                steps.extend(self._tested(state, sub, step, python))
                continue
            if sub.skill not in PROGRAM_SKILLS or sub.id in escalations:
                steps.append(step)
                continue
            writers, error = _program_history(state, sub.id, python)
            writer = self._writer(state, sub, writers)
            if writer is None:  # every writer failed: solve it directly
                steps.append(step.model_copy(update={"executor": _direct(state, sub, python)}))
                continue
            program_id = f"{step.id}-program"
            steps.append(
                step.model_copy(
                    update={
                        "id": program_id,
                        "executor": writer,
                        "instruction": program_instruction(sub, error),
                        "covers": None,
                    }
                )
            )
            steps.append(
                step.model_copy(
                    update={
                        "executor": python,
                        "instruction": f"{{{program_id}}}",
                        "depends_on": [program_id],
                    }
                )
            )
        return Plan(milestone=plan.milestone, steps=steps)

    def _tested(self, state: EpisodeState, sub: Subtask, step: Step, python: str) -> list[Step]:
        """The code step, and a python step running the stub's examples against it; after a
        failed run, the code is rewritten by an untried writer shown the failure."""
        tests = example_tests(sub.instruction or "")
        if tests is None:
            return [step]
        history = _test_history(state, sub.id, python)
        writer = self._writer(state, sub, history.writers)
        if history.report is not None and writer is not None:
            report = history.report[: MAX_ERROR_CHARS * 3]
            if state.params.policies.repair_shows_code:
                note = REPAIR_NOTE.format(code=history.code[:MAX_CODE_CHARS], report=report)
            else:
                note = FRESH_NOTE.format(report=report)
            step = step.model_copy(
                update={"executor": writer, "instruction": step.instruction + note}
            )
        elif not history.writers and writer is not None:
            step = step.model_copy(update={"executor": writer})
        check = Step(
            id=f"{step.id}-tests",
            executor=python,
            instruction=tests.program(step.id),
            depends_on=[step.id],
        )
        return [step, check]

    @staticmethod
    def _writer(state: EpisodeState, sub: Subtask, tried: list[str]) -> str | None:
        """The cheapest LLM likely to write the program (`greedy`'s rule on the code skill,
        with `policies.program_threshold`)
        among those not tried yet: another model is another draw, and a measured code rate
        does not say which of two models writes this program. None once no useful one is left."""
        llms = [p for p in state.pool.profiles if p.backend != "tool"]
        as_code = sub.model_copy(update={"skill": "code"})
        options, _ = subtask_options(
            state.task, as_code, llms, state.params.capability.difficulty_slope
        )
        untried = [o for o in options if o.executor not in tried and o.success >= USELESS_BELOW]
        if not untried:
            return None
        return cheapest_capable(untried, state.params.policies.program_threshold).executor


def _program_history(state: EpisodeState, sub_id: str, python: str) -> tuple[list[str], str | None]:
    """The writers of `sub_id`'s earlier programs, and the last program's error."""
    writers: list[str] = []
    error = None
    for milestone in state.milestones:
        by_id = {step.id: step for step in milestone.plan.steps}
        for step, result in zip(milestone.plan.steps, milestone.results, strict=True):
            if step.executor == python and step.covers == [sub_id] and step.depends_on:
                program = by_id.get(step.depends_on[0])
                if program is not None:
                    writers.append(program.executor)
                error = result.error or ("it printed nothing" if not result.output else None)
    return writers, error


@dataclass
class _TestHistory:
    writers: list[str] = field(default_factory=list)  # who wrote each tested candidate
    code: str = ""  # the last tested candidate
    report: str | None = None  # what its failed run printed; None when it passed


def _test_history(state: EpisodeState, sub_id: str, python: str) -> _TestHistory:
    history = _TestHistory()
    for milestone in state.milestones:
        ran = {s.id: (s, r) for s, r in zip(milestone.plan.steps, milestone.results, strict=True)}
        for step, result in ran.values():
            if step.executor != python or step.covers or len(step.depends_on) != 1:
                continue
            written, code = ran.get(step.depends_on[0], (None, None))
            if written is None or written.covers != [sub_id]:
                continue
            history.writers.append(written.executor)
            history.code = code.output
            history.report = (
                None if result.status == "ok" else (result.output or result.error or "")
            )
    return history


def _direct(state: EpisodeState, sub: Subtask, python: str) -> str:
    every = estimates(state).options[sub.id]
    options = [o for o in every if o.executor != python] or every
    return cheapest_capable(options, state.params.policies.greedy_threshold).executor
