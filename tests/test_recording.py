"""Recorded outcomes and their replay: `record` runs every executor on every subtask of a split
and writes resumable shards; the profile measured from the records counts what was recorded;
the `replay` backend gives a policy the same steps a live run gives it, offline."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from easy_core.core.errors import ConfigError
from easy_core.core.params import Params
from easy_core.core.schemas import (
    DomainCapability,
    ExecutorProfile,
    LatencyModel,
    OutcomeRecord,
    StepRequest,
    StepResult,
    Task,
)
from easy_core.evaluation.recording import (
    SHARD_TASKS,
    profile_from_records,
    record,
    replay_agreement,
)
from easy_core.executors.pool import ExecutorPool, load_pool_config, replayed
from easy_core.executors.replay import read_records
from easy_core.policies.batch import run_episodes
from easy_core.runtime.episode import EpisodeRunner
from easy_core.world.suites.math import MathSuite

N = SHARD_TASKS + 2  # two shards, the second partial


class Knows:
    """Answers a math task right when a hash of (its name, the task) falls under `skill`;
    tokens and latency vary with the task, so replay has something to get wrong."""

    def __init__(self, name: str, skill: float, price: float):
        self.skill = skill
        self.calls = 0
        self.profile = ExecutorProfile(
            name=name,
            backend="tool",
            model=name,
            price_in_per_1m=price,
            price_out_per_1m=3 * price,
            latency=LatencyModel(ttft_s=0.1, tokens_per_s=50.0),
            context_window=8192,
            max_output_tokens=256,
            max_concurrency=2,
            capability={"math": DomainCapability(success=skill, n=0)},
        )

    def _u(self, request: StepRequest) -> float:
        digest = hashlib.sha256(f"{self.profile.name}|{request.task.id}".encode()).digest()
        return digest[0] / 256

    async def run(self, request: StepRequest) -> StepResult:
        self.calls += 1
        u = self._u(request)
        answer = request.task.answer if u < self.skill else f"{request.task.answer}1"
        tokens_out = 5 + int(40 * u)
        return StepResult(
            step_id=request.step_id,
            executor=self.profile.name,
            status="ok",
            output=f"Working it out.\nAnswer: {answer}",
            tokens_in=30,
            tokens_out=tokens_out,
            cost_usd=self.profile.cost_usd(30, tokens_out),
            latency_s=0.1 + tokens_out / 50,
            covers=list(request.covers),
        )

    def estimate_input_tokens(self, request: StepRequest) -> int:
        return 30

    def output_token_cap(self, request: StepRequest) -> int:
        return 256


def live_pool() -> tuple[ExecutorPool, list[Knows]]:
    executors = [Knows("big", 0.75, 1.0), Knows("small", 0.3, 0.1)]
    return ExecutorPool.of("knows", executors), executors


def test_a_recording_resumes_and_its_profile_counts_what_was_recorded(tmp_path: Path) -> None:
    pool, executors = live_pool()
    directory, written = record(pool, MathSuite(), "train", N, tmp_path)
    assert written == 2 and sum(e.calls for e in executors) == 2 * N
    rows = list(read_records(directory))
    assert len(rows) == 2 * N
    assert {(r.executor, r.subtask_id) for r in rows} == {("big", "t1"), ("small", "t1")}
    big = [r for r in rows if r.executor == "big"]
    assert 0 < sum(r.correct for r in big) < N  # the suite's checker decided, both ways

    # finished shards are kept; a damaged one is recorded again
    assert record(pool, MathSuite(), "train", N, tmp_path)[1] == 0
    (directory / "shard-00001.jsonl").write_text("half a row")
    assert record(pool, MathSuite(), "train", N, tmp_path)[1] == 1
    assert list(read_records(directory)) == rows

    # two executors at a time record the same rows (the Knows latencies are modelled, not timed)
    side_by_side, _ = record(pool, MathSuite(), "train", N, tmp_path / "two", at_once=2)
    assert list(read_records(side_by_side)) == rows

    profile, measurements = profile_from_records(pool, rows)
    by_name = {m.executor: m for m in measurements}
    assert by_name["big"].n == N and by_name["big"].success == sum(r.correct for r in big) / N
    assert by_name["big"].ci95[0] < by_name["big"].success < by_name["big"].ci95[1]
    assert profile.executors["big"].capability["math"].n == N
    assert profile.executors["big"].latency is not None  # fitted to the varied calls


def test_replay_reproduces_live_episodes_offline(tmp_path: Path, params: Params) -> None:
    pool, executors = live_pool()
    suite = MathSuite()
    tasks = list(suite.tasks("test", N, 0))
    record(pool, suite, "test", N, tmp_path)
    replay = ExecutorPool.from_config(replayed(pool.config, tmp_path))
    assert {e.profile.backend for e in replay.executors.values()} == {"replay"}
    # the cards read as the live pool's
    assert [p.card() for p in replay.profiles] == [p.card() for p in pool.profiles]
    for policy in ("strongest", "cheapest"):
        live = run_episodes(tasks, EpisodeRunner(pool, params, suite.check), policy, 0)
        calls = sum(e.calls for e in executors)
        again = run_episodes(tasks, EpisodeRunner(replay, params, suite.check), policy, 0)
        assert sum(e.calls for e in executors) == calls  # replay called no executor
        agreement = replay_agreement(policy, live, again)
        assert agreement.steps >= N and agreement.identical_steps == 1.0
        assert agreement.success_live == agreement.success_replayed
        assert [t.metrics.cost_usd for t in live] == pytest.approx(
            [t.metrics.cost_usd for t in again]
        )
    assert 0 < agreement.success_live < 1

    # the recording knows every outcome: the oracle takes the cheapest executor that was right
    oracle = run_episodes(tasks, EpisodeRunner(replay, params, suite.check), "oracle", 0)
    rows = {(r.executor, r.task_id): r.correct for r in read_records(tmp_path)}
    for task, trajectory in zip(tasks, oracle, strict=True):
        [step] = [r for m in trajectory.milestones for r in m.results]
        right = [name for name in ("small", "big") if rows[name, task.id]]
        assert step.executor == (right[0] if right else "big")
        assert trajectory.correct == bool(right)


def test_replay_says_what_was_not_recorded(tmp_path: Path, params: Params) -> None:
    pool, _ = live_pool()
    suite = MathSuite()
    record(pool, suite, "test", 2, tmp_path)
    replay = ExecutorPool.from_config(replayed(pool.config, tmp_path))
    unrecorded = list(suite.tasks("test", 1, 0, start=5))
    trajectory = run_episodes(unrecorded, EpisodeRunner(replay, params, suite.check), "greedy", 0)
    step = trajectory[0].milestones[0].results[0]
    assert step.status == "failed" and "no recorded outcome of" in (step.error or "")
    assert "easy record" in (step.error or "")
    with pytest.raises(ConfigError, match="no recorded outcomes"):
        list(read_records(tmp_path / "empty"))


def test_a_replay_pool_file_names_the_live_pool_and_its_recording(tmp_path: Path) -> None:
    (tmp_path / "ladder-replay.yaml").write_text(
        "schema_version: 1\nname: ladder-replay\n"
        f"replays: {Path('configs/pools/cpu-ladder.yaml').resolve()}\nrecords: records\n"
    )
    config = load_pool_config(tmp_path / "ladder-replay.yaml")
    live = load_pool_config("configs/pools/cpu-ladder.yaml")
    assert config.name == "ladder-replay"
    assert [p.name for p in config.executors] == [p.name for p in live.executors]
    assert all(
        p.backend == "replay" and p.records == str(tmp_path / "records") for p in config.executors
    )
    assert [p.card() for p in config.executors] == [p.card() for p in live.executors]


def test_calibration_reads_the_test_split_from_a_recording(tmp_path: Path, params: Params) -> None:
    from easy_core.evaluation.calibration import calibrate
    from easy_core.world.sim_world import SimWorld

    pool, executors = live_pool()
    directory, _ = record(pool, MathSuite(), "test", N, tmp_path)
    rows = list(read_records(directory))
    calls = sum(e.calls for e in executors)
    world = SimWorld(params.sim, params.capability)
    report = calibrate(pool, [("math", MathSuite())], N, 0, world, records=rows)
    assert sum(e.calls for e in executors) == calls  # measured from the rows, nothing called
    measured = {r.executor: r.measured for r in report.rows}
    for name in ("big", "small"):
        mine = [r.correct for r in rows if r.executor == name]
        assert measured[name] == sum(mine) / len(mine)
    assert {r.n for r in report.rows} == {N}
    # r over rates of 0 or 1 is vacuous: the informative pairs are counted apart
    informative = [r for r in report.rows if 0 < r.measured < 1]
    assert report.informative_pairs == len(informative) >= 1
    assert report.pearson_informative is None  # fewer than three pairs give no r
    assert report.mean_abs_error_informative == pytest.approx(
        sum(abs(r.simulated - r.measured) for r in informative) / len(informative)
    )


class Combines(Knows):
    """On a compound task: a part right when the hash falls under `skill`; the combining step
    copies the answers its inputs gave, as a real combiner does, so it is right exactly when
    every part reached it right."""

    def __init__(self, name: str, skill: float, price: float):
        super().__init__(name, skill, price)
        for domain in ("math", "writing"):
            self.profile.capability[domain] = DomainCapability(success=skill, n=0)

    def _u(self, request: StepRequest) -> float:
        digest = hashlib.sha256(f"{self.profile.name}|{request.task.id}|{request.covers}".encode())
        return digest.digest()[0] / 256

    async def run(self, request: StepRequest) -> StepResult:
        from easy_core.world.suites.answers import final_line
        from easy_core.world.suites.compound_math import SEPARATOR

        self.calls += 1
        sub = request.task.subtask(request.covers[0])
        if sub.depends_on:
            # a live step's inputs cover their subtasks; a recording's gold inputs name theirs
            given = {
                c: final_line(r.output) for r in request.inputs for c in r.covers or r.sub_answers
            }
            answer = SEPARATOR.join(given.get(dep, "?") for dep in sub.depends_on)
        else:
            answer = sub.gold if self._u(request) < self.skill else f"{sub.gold}1"
        return StepResult(
            step_id=request.step_id,
            executor=self.profile.name,
            status="ok",
            output=f"Working it out.\nAnswer: {answer}",
            tokens_in=30,
            tokens_out=20,
            cost_usd=self.profile.cost_usd(30, 20),
            latency_s=0.5,
            covers=list(request.covers),
        )


def recorded_row(task: Task, executor: str, sub_id: str, output: str, correct: bool) -> str:
    """One recorded test-split row of `executor` on a subtask of `task`, as a shard line."""
    return OutcomeRecord(
        suite=task.suite, split="test", task_id=task.id, subtask_id=sub_id,
        skill=task.subtask(sub_id).skill, executor=executor, status="ok", output=output,
        correct=correct, tokens_in=10, tokens_out=5, latency_s=0.1, cost_usd=0.0,
    ).model_dump_json()  # fmt: skip


def test_replay_passes_a_wrong_part_on_to_the_step_that_combines_it(
    tmp_path: Path, params: Params
) -> None:
    """A compound task's combining step was recorded with the gold parts as its inputs; replayed
    after a wrong part, it must be wrong as the live combiner is, not right from inputs it never
    had. Live and replayed episodes agree task by task, and the leak this guards against would
    show as replayed success above live."""
    from easy_core.world.suites.compound_math import CompoundMathSuite

    suite = CompoundMathSuite()
    executors = [Combines("big", 0.8, 1.0), Combines("small", 0.4, 0.1)]
    pool = ExecutorPool.of("combines", executors)
    tasks = list(suite.tasks("test", 8, 0))
    record(pool, suite, "test", 8, tmp_path)
    replay = ExecutorPool.from_config(replayed(pool.config, tmp_path))
    for policy in ("strongest", "cheapest"):
        live_runner = EpisodeRunner(pool, params, suite.check, score=suite.score)
        replay_runner = EpisodeRunner(replay, params, suite.check, score=suite.score)
        live = run_episodes(tasks, live_runner, policy, 0)
        again = run_episodes(tasks, replay_runner, policy, 0)
        assert [t.correct for t in again] == [t.correct for t in live]
        assert [t.scores for t in again] == [t.scores for t in live]
        agreement = replay_agreement(policy, live, again)
        assert agreement.scores_live == agreement.scores_replayed
        assert 0 < agreement.scores_live["parts"] < 1
    # the case that matters happened: a part went wrong, and every recorded combiner was right
    assert not all(t.correct for t in live)
    combining = [r for r in read_records(tmp_path) if r.skill == "writing"]
    assert combining and all(r.correct for r in combining)


def test_replay_serves_a_wrong_output_where_the_gold_inputs_do_not_show(
    tmp_path: Path, params: Params
) -> None:
    """A combining step whose recorded text does not quote its inputs cannot have the wrong
    ones put in: after a wrong part it gets an output another executor was recorded wrong with,
    never its own right one."""
    from easy_core.world.suites.compound_math import CompoundMathSuite

    suite = CompoundMathSuite()
    task = next(iter(suite.tasks("test", 1, 0)))
    pool, _ = live_pool()  # big and small, on a compound task's skills below
    for profile in pool.config.executors:
        profile.capability["writing"] = DomainCapability(success=0.5, n=0)
    sink = task.subtasks[-1]

    rows = [recorded_row(task, name, sub.id, f"Answer: {sub.gold}", name == "small")
            for sub in task.subtasks[:-1] for name in ("big", "small")]  # fmt: skip
    rows += [recorded_row(task, "big", sink.id, "Combined as asked.", True),
             recorded_row(task, "small", sink.id, "Answer: no idea", False)]  # fmt: skip
    (tmp_path / "shard-00000.jsonl").write_text("\n".join(rows) + "\n")
    replay = ExecutorPool.from_config(replayed(pool.config, tmp_path))
    [trajectory] = run_episodes([task], EpisodeRunner(replay, params, suite.check), "strongest", 0)
    results = {r.covers[0]: r for m in trajectory.milestones for r in m.results}
    assert {results[sub.id].executor for sub in task.subtasks} == {"big"}
    assert results[sink.id].output == "Answer: no idea"  # big's wrong parts reached it


class Echoes(Combines):
    """A Combines whose combining step also says which executor each of its inputs came from
    ("given" for a bare gold answer), so a test sees what a recording delivered."""

    async def run(self, request: StepRequest) -> StepResult:
        result = await super().run(request)
        if request.inputs:
            sources = ",".join(r.executor for r in request.inputs)
            result.output = f"inputs from {sources}\n{result.output}"
        return result


def test_a_recording_hands_each_step_the_right_outputs_recorded_before_it(tmp_path: Path) -> None:
    """With recorded inputs (the default) a combining step reads, for each part, the right
    output of the likeliest executor that got it right (gold only where none did), and its row
    says so; recording a gold-input shard again calls the executors on the combining steps
    only, keeping the parts' rows; a suite without prerequisites records the same rows either
    way."""
    from easy_core.world.suites.compound_math import CompoundMathSuite

    suite = CompoundMathSuite()
    executors = [Echoes("big", 0.6, 1.0), Echoes("small", 0.4, 0.1)]
    pool = ExecutorPool.of("echoes", executors)
    record(pool, suite, "test", 4, tmp_path / "gold", inputs="gold")
    gold_rows = list(read_records(tmp_path / "gold"))
    assert all(not r.inputs_from for r in gold_rows)
    sinks = [r for r in gold_rows if r.skill == "writing"]
    assert sinks and all(r.output.startswith("inputs from given,") for r in sinks)

    # the same shard recorded again with recorded inputs: parts kept, combiners called again
    directory = tmp_path / "gold" / "math-compound-test"
    calls_before = [e.calls for e in executors]
    _, written = record(pool, suite, "test", 4, tmp_path / "gold")
    assert written == 1
    assert [e.calls - c for e, c in zip(executors, calls_before, strict=True)] == [4, 4]
    rows = list(read_records(directory))

    def by_key(records: list[OutcomeRecord]) -> dict[tuple[str, str, str], OutcomeRecord]:
        return {(r.task_id, r.subtask_id, r.executor): r for r in records if r.skill == "math"}

    parts = by_key(rows)
    assert parts == by_key(gold_rows)
    handed_on = 0
    for sink in (r for r in rows if r.skill == "writing"):
        task = next(t for t in suite.tasks("test", 4, 0) if t.id == sink.task_id)
        expected = {}
        for dep in task.subtask(sink.subtask_id).depends_on:
            right = [name for name in ("big", "small") if parts[task.id, dep, name].correct]
            if right:
                expected[dep] = right[0]  # big's card is the likelier one
        assert sink.inputs_from == expected
        sources = [expected.get(dep, "given") for dep in task.subtask(sink.subtask_id).depends_on]
        assert sink.output.startswith(f"inputs from {','.join(sources)}\n")
        handed_on += len(expected)
    assert handed_on > 0 and "small" in {v for r in rows for v in r.inputs_from.values()}
    assert record(pool, suite, "test", 4, tmp_path / "gold")[1] == 0  # finished: kept

    math_pool, _ = live_pool()
    record(math_pool, MathSuite(), "train", 3, tmp_path / "m", inputs="gold")
    assert record(math_pool, MathSuite(), "train", 3, tmp_path / "m")[1] == 0


def test_replay_has_no_right_outcome_for_a_question_the_step_did_not_ask(
    tmp_path: Path, params: Params
) -> None:
    """A row stands for the question it was recorded with. A step that keeps its subtask's
    numbers in other words gets the recorded row; one that asks another part's question gets
    an output recorded wrong on its subtask, or fails as unrecorded where none was, never the
    recorded right answer (live, the executor answers what it was asked)."""
    from easy_core.executors.replay import ReplayExecutor, missing_numbers
    from easy_core.world.suites.compound_math import CompoundMathSuite

    suite = CompoundMathSuite()
    task = next(iter(suite.tasks("test", 1, 0)))
    first, second = task.subtasks[:2]
    assert missing_numbers(second.instruction, first) and missing_numbers(first.instruction, second)

    rows = [
        recorded_row(task, "big", sub.id, f"Answer: {sub.gold}", True) for sub in (first, second)
    ]
    # only the first has a wrong row
    rows.append(recorded_row(task, "small", first.id, "Answer: 0.5", False))
    (tmp_path / "shard-00000.jsonl").write_text("\n".join(rows) + "\n")
    pool, _ = live_pool()
    big = ReplayExecutor(replayed(pool.config, tmp_path).executors[0])

    def ask(sub_id: str, instruction: str) -> StepResult:
        return big.simulate(
            StepRequest(step_id="s", instruction=instruction, task=task, covers=(sub_id,))
        )

    reworded = "Work this out: " + " ".join(re.findall(r"\d+(?:\.\d+)?", first.instruction))
    for instruction in (first.instruction, reworded):
        asked = ask(first.id, instruction)
        assert (asked.status, asked.output) == ("ok", f"Answer: {first.gold}")
    other = ask(first.id, second.instruction)
    assert (other.status, other.output) == ("ok", "Answer: 0.5")
    lone = ask(second.id, first.instruction)
    assert lone.status == "failed" and lone.output == ""
    assert "leaves out" in (lone.error or "") and missing_numbers(first.instruction, second)[0] in (
        lone.error or ""
    )


def test_a_combining_step_a_part_never_reached_has_that_part_wrong_not_another_executors(
    tmp_path: Path,
) -> None:
    """A combining step that depends on some parts only was recorded with every part's right
    result. Replayed, the parts it was given stay as delivered and the others are `?`; it is not
    served another executor's wrong combination, whose other parts were combined right."""
    from easy_core.executors.replay import UNDELIVERED, ReplayExecutor
    from easy_core.world.suites.compound_math import SEPARATOR, CompoundMathSuite

    suite = CompoundMathSuite()
    task = next(iter(suite.tasks("test", 1, 0)))
    *parts, combine = task.subtasks
    golds = [sub.gold for sub in parts]
    assert len(set(golds)) == len(golds)  # each part's answer can be told apart in the line
    rows = [recorded_row(task, "big", sub.id, f"Answer: {sub.gold}", True) for sub in parts]
    rows.append(recorded_row(task, "big", combine.id, f"Answer: {task.answer}", True))
    almost = SEPARATOR.join([*golds[:-1], "0"])
    rows.append(recorded_row(task, "small", combine.id, f"Answer: {almost}", False))
    (tmp_path / "shard-00000.jsonl").write_text("\n".join(rows) + "\n")
    pool, _ = live_pool()
    big = ReplayExecutor(replayed(pool.config, tmp_path).executors[0])

    first = StepResult(
        step_id="s1", executor="big", status="ok", output=f"Answer: {golds[0]}",
        covers=[parts[0].id],
    )  # fmt: skip
    combined = big.simulate(
        StepRequest(
            step_id="s9", instruction=combine.instruction, task=task, covers=(combine.id,),
            inputs=(first,),
        )
    )  # fmt: skip
    expected = SEPARATOR.join([golds[0], *[UNDELIVERED] * (len(parts) - 1)])
    assert (combined.status, combined.output) == ("ok", f"Answer: {expected}")
    assert suite.score(task, combined.output)["parts"] == 1 / len(parts)  # the one it was given
