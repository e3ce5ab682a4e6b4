"""The `replay` backend: recorded outcomes served as an executor (RouterBench's method). A step
on subtask S of task T gets what the live executor answered when `easy record` ran it on S with
right prerequisites as its inputs (a right output recorded on each, or its gold answer:
`recording`'s `inputs`): its output, tokens, latency, status; cost at the card's prices. So any
policy is evaluated on real outcomes offline, in virtual time, in seconds.

A row stands for the inputs it was recorded with, right ones. Where a step's prerequisites did
not reach it right in this episode (a wrong or failed earlier result, or none delivered),
replaying the row as it is would hand on a right answer built from inputs the step never had:
a compound task's combining step would be right whatever its parts said. Such a step is wrong,
as it is in the simulated world, and its output says so the way a live one would:
  1. a row that was wrong with right inputs stays as recorded;
  2. otherwise the gold answers of the prerequisites that went wrong are replaced in its text by
     the answers delivered (a step that carries its inputs forward, as a combiner does), and
     those of prerequisites that no input delivered at all, where the subtask's gold carries
     them, by `?` (a combining step that does not depend on every part has no result for the
     others; rule 3 would hand it another executor's combination of right parts);
  3. where they do not appear, another executor's wrong output on the subtask is served;
  4. where no executor got it wrong, the row stands: the one case replay cannot make wrong;
     except a row any answer would have passed (`informative` false: a spare move recorded
     after the game was won), which says nothing of the state the episode reached instead, so
     the step fails as unrecorded. A game that left the walkthrough is never won back in
     replay: a lower bound on a live player, who might recover.
An input counts as right only where it is a recorded output that was right, so a step served
by 2 or 3 passes its wrongness on to the steps after it. A right input other than the one the
row was recorded with (another executor's right output) is taken as equivalent.

A row also stands for the question it was recorded with: the subtask's own instruction, with
its answer format. An orchestrator writes its own, and a live executor answers what it was
asked, even though every step is also shown the whole task. A step whose instruction leaves
out a number of its subtask's question (a part's operands, a problem's quantities) asked
something else, and replay has no outcome for it: it is served as a wrong step is (rule 2 or
3 above, else failed as unrecorded), never as the recorded right one. Numbers are what this
can check; a question without them (a research hop, a game move) is taken as asked.

What replay assumes beyond that, and a live run need not honour: an executor's outcome on a
subtask does not depend on the wording of an instruction that keeps its question's numbers, or
on the plan around it. Tools that run what the orchestrator wrote (the python tool) are
replayed on the subtask's own instruction. The agreement of replayed and live runs is measured
(docs/BENCHMARKS.md, "Recorded outcomes").
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from easy_core.core.errors import ConfigError
from easy_core.core.schemas import (
    ExecutorProfile,
    OutcomeRecord,
    StepRequest,
    StepResult,
    Subtask,
)
from easy_core.executors.base import run_simulated
from easy_core.world.suites.answers import final_line


def read_records(directory: str | Path) -> Iterator[OutcomeRecord]:
    """Every row of a recording: a `<suite>-<split>` folder, or a folder of them."""
    directory = Path(directory)
    shards = sorted(directory.glob("shard-*.jsonl")) or sorted(directory.glob("*/shard-*.jsonl"))
    if not shards:
        raise ConfigError(
            f"{directory}: no recorded outcomes; run `easy record --pool POOL --suite SUITE "
            "--split SPLIT --n N --out DIR` first"
        )
    for path in shards:
        yield from read_record_file(path)


def read_record_file(path: str | Path) -> list[OutcomeRecord]:
    """The rows of one recorded shard file."""
    with open(path, encoding="utf-8") as handle:
        return [OutcomeRecord.model_validate_json(line) for line in handle if line.strip()]


UNDELIVERED = "?"  # what a combining step writes for a part whose result never reached it

_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?")  # not the 1 of an id such as m1 or r1


def missing_numbers(instruction: str, subtask: Subtask) -> list[str]:
    """The numbers of the subtask's own question (its instruction, as recorded) that a step's
    `instruction` leaves out, each as often as it is missing."""
    missing = Counter(_NUMBER.findall(subtask.instruction)) - Counter(_NUMBER.findall(instruction))
    return sorted(missing.elements())


@cache
def _recording(directory: str) -> dict[tuple[str, str, str], OutcomeRecord]:
    """(executor, task, subtask) -> row; read once per process and folder."""
    return {(r.executor, r.task_id, r.subtask_id): r for r in read_records(directory)}


@cache
def _wrong_outputs(directory: str) -> dict[tuple[str, str], list[str]]:
    """(task, subtask) -> the outputs recorded wrong on it, by executor name."""
    wrong: dict[tuple[str, str], list[str]] = {}
    for (_, task_id, sub_id), row in sorted(_recording(directory).items()):
        if row.status == "ok" and not row.correct:
            wrong.setdefault((task_id, sub_id), []).append(row.output)
    return wrong


class ReplayExecutor:
    """Replays one executor's recorded rows; it can `simulate`, so episodes run on the
    virtual clock."""

    answers_subtasks = False  # what it replays is an executor's free text, checked as such

    def __init__(self, profile: ExecutorProfile):
        if not profile.records:
            raise ConfigError(
                f"executor {profile.name!r}: backend 'replay' needs `records`: the folder "
                "`easy record` wrote"
            )
        self.profile = profile
        self.rows = _recording(str(Path(profile.records).resolve()))

    def _rows(self, request: StepRequest) -> list[OutcomeRecord] | str:
        """The recorded rows of the subtasks the step covers, or why there are none."""
        if not request.covers:
            return "replay serves recorded subtasks; this step covers none"
        rows = []
        for sub_id in request.covers:
            row = self.rows.get((self.profile.name, request.task.id, sub_id))
            if row is None:
                return (
                    f"no recorded outcome of {self.profile.name} on {request.task.id}/{sub_id} "
                    f"in {self.profile.records} (record the task's split with `easy record`)"
                )
            rows.append(row)
        return rows

    def simulate(self, request: StepRequest) -> StepResult:
        rows = self._rows(request)
        if isinstance(rows, str):
            return StepResult(
                step_id=request.step_id,
                executor=self.profile.name,
                status="failed",
                error=rows,
                covers=list(request.covers),
            )
        tokens_in = sum(r.tokens_in for r in rows)
        tokens_out = sum(r.tokens_out for r in rows)
        right = self._delivered_right(request)
        failed = next((r for r in rows if r.status != "ok"), None)
        error = None if failed is None else failed.error
        unknown = next(
            (r for r in rows if not r.informative and self._wrong(request, r, right)), None
        )
        if unknown is not None:
            error = (
                f"no recorded outcome of {self.profile.name} on {request.task.id}/"
                f"{unknown.subtask_id} from the inputs this episode reached: its row was "
                "recorded where any answer passes, from other inputs"
            )
        outputs = [self._output(request, row, right) for row in rows]
        unasked = next((row for row, out in zip(rows, outputs, strict=True) if out is None), None)
        if unasked is not None and error is None:
            missing = missing_numbers(request.instruction, request.task.subtask(unasked.subtask_id))
            error = (
                f"no recorded outcome of {self.profile.name} on {request.task.id}/"
                f"{unasked.subtask_id} for what this step asked: its instruction leaves out "
                f"{', '.join(missing)} of the subtask's question, and no executor was recorded "
                "wrong on it"
            )
        return StepResult(
            step_id=request.step_id,
            executor=self.profile.name,
            status="ok" if error is None else "failed",
            output="" if unknown or unasked else "\n".join(out or "" for out in outputs),
            error=error,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            cost_usd=self.profile.cost_usd(tokens_in, tokens_out),
            # one executor answers the covered subtasks one after another
            latency_s=sum(r.latency_s for r in rows),
            covers=list(request.covers),
        )

    def _delivered_right(self, request: StepRequest) -> dict[str, bool]:
        """Subtask -> whether the step's inputs brought it right: an input is right where it is
        a recorded output, unchanged, that was right."""
        right: dict[str, bool] = {}
        for result in request.inputs:
            rows = [self.rows.get((result.executor, request.task.id, c)) for c in result.covers]
            recorded = [r for r in rows if r is not None]
            as_recorded = (
                result.status == "ok"
                and len(recorded) == len(rows)
                and result.output == "\n".join(r.output for r in recorded)
            )
            for sub_id, row in zip(result.covers, rows, strict=True):
                right[sub_id] = as_recorded and row is not None and row.correct
        return right

    @staticmethod
    def _wrong(request: StepRequest, row: OutcomeRecord, right: dict[str, bool]) -> list[str]:
        """The row's prerequisites that did not reach this step right."""
        return [
            p for p in request.task.subtask(row.subtask_id).depends_on if not right.get(p, False)
        ]

    def _output(
        self, request: StepRequest, row: OutcomeRecord, right: dict[str, bool]
    ) -> str | None:
        """The row's output, or what this step answers from the wrong inputs it had or the other
        question it asked (the module's rules); None where replay has no outcome for it."""
        task = request.task
        wrong = self._wrong(request, row, right)
        unasked = missing_numbers(request.instruction, task.subtask(row.subtask_id))
        if not row.correct or not (wrong or unasked):
            return row.output
        if wrong:  # what it combines reached it wrong, whatever it was asked: rule 2 first
            delivered = {
                sub_id: final_line(result.output)
                for result in request.inputs
                for sub_id in result.covers
            }
            text, carried = row.output, task.subtask(row.subtask_id).gold
            for prereq in wrong:
                gold = task.subtask(prereq).gold
                if not gold:
                    continue
                pattern = rf"(?<![\w.]){re.escape(gold)}(?![\w.])"
                answer = delivered.get(prereq)
                if prereq not in delivered and re.search(pattern, carried):
                    answer = UNDELIVERED  # a result its answer carries never reached it
                if answer is not None:
                    text = re.sub(pattern, lambda _, given=answer: given, text)
            if text != row.output:
                return text
        others = _wrong_outputs(str(Path(self.profile.records).resolve()))
        served = next(iter(others.get((task.id, row.subtask_id), [])), None)
        if served is None and not unasked:
            return row.output  # rule 4: the one case replay cannot make wrong
        return served

    async def run(self, request: StepRequest) -> StepResult:
        return await run_simulated(self.simulate, request)

    def estimate_input_tokens(self, request: StepRequest) -> int:
        rows = self._rows(request)
        return 0 if isinstance(rows, str) else sum(r.tokens_in for r in rows)

    def output_token_cap(self, request: StepRequest) -> int:
        # What the live executor would be allowed (its `max_tokens`): the ledger reserves it and
        # the step's timeout is predicted from it, as in a live run.
        return request.max_output_tokens
