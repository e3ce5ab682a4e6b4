"""The `embodied` suite and the stateless `textworld` tool, on small level-1 games made here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from easy_core.core.errors import ConfigError, EasyError
from easy_core.core.params import Params
from easy_core.core.schemas import (
    DomainCapability,
    ExecutorProfile,
    LatencyModel,
    PoolConfig,
    StepRequest,
    StepResult,
    Task,
    Trajectory,
)
from easy_core.executors.pool import ExecutorPool
from easy_core.executors.textworld_tool import TextWorldExecutor
from easy_core.policies import get_policy
from easy_core.runtime.episode import EpisodeRunner
from easy_core.world.games import (
    GAME_OVER_NOTE,
    GameState,
    TextWorldError,
    normalize_command,
    replay,
)
from easy_core.world.suites import get_suite
from easy_core.world.suites.embodied import SLACK_COMMAND, SLACK_MOVES, EmbodiedSuite, game_seed
from tests.conftest import run


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> EmbodiedSuite:
    return EmbodiedSuite(cache_dir=tmp_path_factory.mktemp("textworld"), levels=(1,))


@pytest.fixture(scope="module")
def train_task(suite: EmbodiedSuite) -> Task:
    return next(suite.tasks("train", 1, seed=0))


@pytest.fixture(scope="module")
def test_task(suite: EmbodiedSuite) -> Task:
    return next(suite.tasks("test", 1, seed=0))


def profile(name: str, skill: str, **extra: object) -> ExecutorProfile:
    return ExecutorProfile(
        name=name,
        backend="tool",
        price_in_per_1m=0.0,
        price_out_per_1m=0.0,
        latency=LatencyModel(ttft_s=5.0, tokens_per_s=1000.0),
        context_window=100_000,
        capability={skill: DomainCapability(success=0.99, n=100)},
        **extra,
    )


class WalkthroughMover:
    """Stands in for the LLM: answers each move `a_i` with the walkthrough's i-th command (then
    the slack command), in the sloppy formats a model writes, which the tool must normalise."""

    def __init__(self) -> None:
        self.profile = profile("mover", "embodied")
        self.calls = 0

    async def run(self, request: StepRequest) -> StepResult:
        self.calls += 1
        index = int(request.covers[0][1:])
        walkthrough = request.task.metadata["walkthrough"]
        command = walkthrough[index - 1] if index <= len(walkthrough) else SLACK_COMMAND
        output = f"> `{command.title()}`." if index % 2 else command
        return StepResult(
            step_id=request.step_id,
            executor=self.profile.name,
            status="ok",
            output=output,
            tokens_in=10,
            tokens_out=2,
            covers=list(request.covers),
        )

    def estimate_input_tokens(self, request: StepRequest) -> int:
        return 10

    def output_token_cap(self, request: StepRequest) -> int:
        return 2


def game_pool() -> tuple[ExecutorPool, WalkthroughMover]:
    """The textworld tool built from a pool config (as a pool YAML would), plus the mover."""
    config = PoolConfig(name="tw-tool", executors=[profile("game", "game", model="textworld")])
    tool = ExecutorPool.from_config(config).executors["game"]
    assert isinstance(tool, TextWorldExecutor)
    mover = WalkthroughMover()
    return ExecutorPool.of("embodied-test", [tool, mover]), mover


# --------------------------------------------------------------------------- tasks


def test_tasks_are_deterministic_cached_and_split_apart(
    suite: EmbodiedSuite, train_task: Task, test_task: Task, tmp_path: Path
) -> None:
    game_file = Path(train_task.metadata["game_file"])
    mtime = game_file.stat().st_mtime_ns
    again = next(suite.tasks("train", 1, seed=0))
    assert again == train_task
    assert game_file.stat().st_mtime_ns == mtime  # reused, not generated again

    # Made again in another cache: the same game, byte for byte, and the same task.
    elsewhere = next(EmbodiedSuite(cache_dir=tmp_path, levels=(1,)).tasks("train", 1, seed=0))
    other_file = Path(elsewhere.metadata["game_file"])
    assert other_file.read_bytes() == game_file.read_bytes()
    assert elsewhere.subtasks == train_task.subtasks and elsewhere.prompt == train_task.prompt
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp leftovers

    assert test_task.metadata["game_file"] != train_task.metadata["game_file"]
    assert (
        json.loads(game_file.with_suffix(".json").read_text())["metadata"]["uuid"]
        != (
            json.loads(Path(test_task.metadata["game_file"]).with_suffix(".json").read_text())[
                "metadata"
            ]["uuid"]
        )
    )
    train_seeds = {game_seed(0, "train", i) for i in range(200)}
    test_seeds = {game_seed(0, "test", i) for i in range(200)}
    assert not train_seeds & test_seeds and all(s < 2**31 for s in train_seeds | test_seeds)


def test_task_shape(train_task: Task) -> None:
    walkthrough = train_task.metadata["walkthrough"]
    moves = len(walkthrough) + SLACK_MOVES
    assert train_task.id == "embodied-train-0-000000" and train_task.family == "level1"
    assert train_task.suite == "embodied" and train_task.answer == "won"
    assert [s.id for s in train_task.subtasks] == [
        sid for i in range(1, moves + 1) for sid in (f"a{i}", f"o{i}")
    ]
    subs = train_task.subtask_index
    assert subs["a1"].depends_on == [] and subs["o1"].depends_on == ["a1"]
    assert subs["a2"].depends_on == ["o1"] and subs["o2"].depends_on == ["a2", "o1"]
    assert subs["a1"].gold == walkthrough[0] and subs[f"a{moves}"].gold == SLACK_COMMAND
    assert {s.skill for s in train_task.subtasks} == {"embodied", "game"}
    assert all(s.instruction for s in train_task.subtasks)
    assert train_task.sink.id == f"o{moves}"
    # The first move has no dependency: the initial state is in the prompt.
    initial = replay(train_task.metadata["game_file"], [])
    assert initial.render() in train_task.prompt and initial.admissible


# --------------------------------------------------------------------------- replay and checks


def test_walkthrough_wins_and_other_moves_do_not(suite: EmbodiedSuite, train_task: Task) -> None:
    game_file, walkthrough = train_task.metadata["game_file"], train_task.metadata["walkthrough"]
    won = replay(game_file, walkthrough)
    assert won.won and not won.lost and won.score == won.max_score > 0
    assert GameState.parse(won.render()) == won
    assert suite.check(train_task, won.render())
    assert suite.score(train_task, won.render()) == {
        "won": 1.0,
        "actions": float(len(walkthrough)),
        "game_score": float(won.max_score),
    }

    # After the win, further commands are not applied.
    after = replay(game_file, [*walkthrough, "look", "inventory"])
    assert after.history == won.history and after.won and after.note == GAME_OVER_NOTE

    # Not admissible: still sent and recorded; meta commands never reach the interpreter.
    wrong = replay(game_file, ["dance wildly", "quit", "look"])
    assert wrong.history == ("dance wildly", "quit", "look") and not wrong.won
    assert wrong.admissible and not suite.check(train_task, wrong.render())
    assert suite.score(train_task, wrong.render())["won"] == 0.0

    # A claimed win is replayed, not believed.
    forged = GameState((), "You won!", (), 1, 1, won=True, lost=False).render()
    assert not suite.check(train_task, forged)
    assert not suite.check(train_task, None) and not suite.check(train_task, "won")
    assert suite.score(train_task, "won") == {"won": 0.0, "actions": 0.0, "game_score": 0.0}


def test_check_subtask(suite: EmbodiedSuite, train_task: Task) -> None:
    for sub in train_task.subtasks:
        assert suite.check_subtask(train_task, sub, sub.gold)
    subs = train_task.subtask_index
    k = len(train_task.metadata["walkthrough"])
    assert suite.check_subtask(train_task, subs["a1"], f"`{subs['a1'].gold.upper()}`.")
    assert not suite.check_subtask(train_task, subs["a1"], "dance wildly")
    assert not suite.check_subtask(train_task, subs["o1"], "history: (none)")
    # A slack move after the win: any command does.
    assert suite.check_subtask(train_task, subs[f"a{k + 1}"], "inventory")
    assert not suite.check_subtask(train_task, subs[f"a{k + 1}"], "")


def test_normalize_command() -> None:
    assert normalize_command("> `Go North`.") == "go north"
    assert normalize_command("```\ntake  key from Chest\n```") == "take key from chest"
    assert normalize_command('Command: "open chest"!\nbecause it is closed') == "open chest"
    assert normalize_command("eat | cashew") == "eat cashew"
    assert normalize_command("  \n ") == ""


# --------------------------------------------------------------------------- through the runtime


@pytest.mark.parametrize("mode", ["virtual", "wall"])
def test_episode_through_the_runtime(suite: EmbodiedSuite, train_task: Task, mode: str) -> None:
    pool, mover = game_pool()
    runner = EpisodeRunner(pool, Params(), suite.check, score=suite.score)
    trajectory = run(runner.run(train_task, get_policy("greedy"), seed=0), mode=mode)

    k = len(train_task.metadata["walkthrough"])
    assert trajectory.end_reason == "final_answer" and trajectory.correct
    assert trajectory.scores["won"] == 1.0 and trajectory.scores["actions"] == float(k)
    assert trajectory.scores["game_score"] >= 1.0
    assert trajectory.metrics.n_steps == len(train_task.subtasks) and mover.calls == k + SLACK_MOVES
    results = {r.covers[0]: r for m in trajectory.milestones for r in m.results}
    for sub in train_task.subtasks:
        result = results[sub.id]
        assert result.status == "ok"
        assert result.executor == ("game" if sub.skill == "game" else "mover")
        assert suite.check_subtask(train_task, sub, result.output)
        if sub.skill == "game":
            assert result.output == sub.gold and result.tokens_out > 0
    assert trajectory.final_answer == train_task.sink.gold


# --------------------------------------------------------------------------- errors


def request_for(task: Task, *outputs: str) -> StepRequest:
    inputs = tuple(
        StepResult(step_id=f"s{i}", executor="x", status="ok", output=text)
        for i, text in enumerate(outputs)
    )
    return StepRequest(step_id="m1-o1", instruction="Apply the command.", task=task, inputs=inputs)


def test_missing_game_file_is_a_clear_error(train_task: Task, tmp_path: Path) -> None:
    missing = str(tmp_path / "gone" / "game.z8")
    with pytest.raises(TextWorldError, match="does not exist.*EmbodiedSuite") as caught:
        replay(missing, ["look"])
    assert isinstance(caught.value, EasyError)

    tool = TextWorldExecutor(profile("game", "game", model="textworld"))
    lost = train_task.model_copy(update={"metadata": {**train_task.metadata, "game_file": missing}})
    result = run(tool.run(request_for(lost, "look")))
    assert result.status == "failed" and "does not exist" in (result.error or "")

    no_command = run(tool.run(request_for(train_task)))
    assert no_command.status == "failed" and "no command" in (no_command.error or "")
    foreign = train_task.model_copy(update={"metadata": {}})
    result = run(tool.run(request_for(foreign, "look")))
    assert result.status == "failed" and "embodied suite" in (result.error or "")

    with pytest.raises(ConfigError, match="levels"):
        EmbodiedSuite(cache_dir=tmp_path, levels=(9,))
    with pytest.raises(ConfigError, match="split"):
        next(EmbodiedSuite(cache_dir=tmp_path).tasks("dev", 1, seed=0))


def test_tool_continues_the_furthest_state(train_task: Task) -> None:
    game_file, walkthrough = train_task.metadata["game_file"], train_task.metadata["walkthrough"]
    tool = TextWorldExecutor(profile("game", "game", model="textworld"))
    start, moved = replay(game_file, []), replay(game_file, ["look"])
    result = run(tool.run(request_for(train_task, start.render(), walkthrough[0], moved.render())))
    assert result.status == "ok"
    assert GameState.parse(result.output) == replay(game_file, ["look", walkthrough[0]])


def test_registered_suite(params: Params) -> None:
    assert isinstance(get_suite("embodied", params), EmbodiedSuite)


# --------------------------------------------------------------------------- recorded, replayed


class InventoryMover(WalkthroughMover):
    """A cheap model that never reads the game: every move is `inventory`."""

    def __init__(self) -> None:
        super().__init__()
        self.profile = profile("lost", "embodied").model_copy(
            update={
                "capability": {"embodied": DomainCapability(success=0.5, n=100)},
            }
        )

    async def run(self, request: StepRequest) -> StepResult:
        result = await super().run(request)
        return result.model_copy(update={"executor": "lost", "output": "inventory"})


def runner_of(pool: ExecutorPool, suite: EmbodiedSuite) -> EpisodeRunner:
    return EpisodeRunner(pool, Params(), suite.check, score=suite.score)


def steps_by_subtask(trajectory: Trajectory) -> dict[str, StepResult]:
    """Each subtask's first result in the episode."""
    steps: dict[str, StepResult] = {}
    for milestone in trajectory.milestones:
        for result in milestone.results:
            steps.setdefault(result.covers[0], result)
    return steps


def test_a_recorded_game_replays_with_the_game_played_live(
    suite: EmbodiedSuite, test_task: Task, tmp_path: Path
) -> None:
    """Moves are recorded on the walkthrough's states; in replay the game tool plays whatever
    move the episode reached, so a wrong move leaves the path and the game is lost, as live."""
    from easy_core.evaluation.recording import profile_from_records, record, replay_agreement
    from easy_core.executors.pool import replayed
    from easy_core.executors.replay import read_records
    from easy_core.policies.batch import run_episodes

    pool, mover = game_pool()
    mover.profile = mover.profile.model_copy(update={"price_in_per_1m": 1.0})
    pool = ExecutorPool.of("movers", [pool.executors["game"], mover, InventoryMover()])
    record(pool, suite, "test", 1, tmp_path)
    rows = list(read_records(tmp_path))
    k = len(test_task.metadata["walkthrough"])
    spare = {r.subtask_id for r in rows if not r.informative}
    assert spare == {f"a{i}" for i in range(k + 1, k + SLACK_MOVES + 1)}  # recorded, for replay
    _, measured = profile_from_records(pool, rows)
    counts = {(m.executor, m.domain): (m.n, m.success) for m in measured}
    assert counts["mover", "embodied"] == (k, 1.0)  # ... never profiled
    assert counts["lost", "embodied"] == (k, 0.0)

    with pytest.raises(ConfigError, match="`live` names \\['referee'\\]"):
        replayed(pool.config, tmp_path, live=["referee"])
    replay_pool = ExecutorPool.from_config(replayed(pool.config, tmp_path, live=["game"]))
    backends = {name: e.profile.backend for name, e in replay_pool.executors.items()}
    assert backends == {"game": "tool", "mover": "replay", "lost": "replay"}
    replay_runner = runner_of(replay_pool, suite)
    for policy in ("strongest", "greedy"):
        live = run_episodes([test_task], runner_of(pool, suite), policy, 0)
        again = run_episodes([test_task], replay_runner, policy, 0)
        assert live[0].correct and again[0].correct
        assert replay_agreement(policy, live, again).identical_steps == 1.0, policy

    # Every move `inventory`: the game leaves the walkthrough at once, live and replayed alike.
    live = run_episodes([test_task], runner_of(pool, suite), "cheapest", 0)
    again = run_episodes([test_task], replay_runner, "cheapest", 0)
    assert not live[0].correct and not again[0].correct
    live_steps, replayed_steps = (steps_by_subtask(t) for t in (live[0], again[0]))
    for i in range(1, k + 1):  # the walkthrough's moves, and the states the game answered
        for sub_id in (f"a{i}", f"o{i}"):
            assert replayed_steps[sub_id].output == live_steps[sub_id].output, sub_id
    state = GameState.parse(replayed_steps[f"o{k}"].output)
    assert state is not None and state.history[0] == "inventory"  # the move really played
    # A spare move was recorded after a win, where any command passes; off the walkthrough
    # replay does not know what the model would do, and says so (live, the move is played).
    spare = replayed_steps[f"a{k + 1}"]
    assert live_steps[f"a{k + 1}"].status == "ok"
    assert spare.status == "failed" and "from the inputs this episode reached" in (
        spare.error or ""
    )
    # the records' oracle reads the live tool's recorded rows too: the right mover on each move
    oracle = run_episodes([test_task], replay_runner, "oracle", 0)
    assert oracle[0].correct and oracle[0].end_reason == "final_answer"
