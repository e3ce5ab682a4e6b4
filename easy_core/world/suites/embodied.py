"""The `embodied` suite: TextWorld games, generated offline, won by issuing text commands.

A task is one game. Its plan skeleton is a chain of moves: `a_i` (skill `embodied`, an LLM picks
the next command from the latest state) then `o_i` (skill `game`, the stateless `textworld`
tool applies it and answers the new state block). The walkthrough has k commands; the chain has
k + 2 moves, so a policy may waste two. The answer is the last state block; it is checked by
replaying its history, so a claimed "won: true" counts only if the moves really win.

Games are made with textworld's generator (the API behind `tw-make custom`) from a seed that is
a function of (seed, split, index) alone, and cached under `cache_dir`, one folder per game.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from easy_core.core.errors import ConfigError
from easy_core.core.schemas import Subtask, Task
from easy_core.world.games import (
    GameState,
    TextWorldError,
    check_game_file,
    import_textworld,
    normalize_command,
    replay,
)
from easy_core.world.suites.splits import checked_split

SLACK_MOVES = 2
SLACK_COMMAND = "look"
BUDGET_USD = 0.05
BUDGET_S = 600.0
GAME_FILE = "game.z8"
MOVE_INSTRUCTION = (
    "You are playing a text adventure. Read the latest game state in the data section and reply "
    "with exactly one command from its admissible commands, nothing else."
)
FIRST_MOVE_INSTRUCTION = (
    "You are playing a text adventure. Read the initial game state in the task and reply with "
    "exactly one command from its admissible commands, nothing else."
)
APPLY_INSTRUCTION = "Apply the command."


@dataclass(frozen=True)
class Level:
    """`tw-make custom` settings of one difficulty level."""

    world_size: int
    nb_objects: int
    quest_length: int


LEVELS = {
    1: Level(world_size=2, nb_objects=4, quest_length=1),
    2: Level(world_size=3, nb_objects=6, quest_length=2),
    3: Level(world_size=5, nb_objects=8, quest_length=3),
}


def game_seed(seed: int, split: str, index: int) -> int:
    """The generator seed of task `index` of `split`. Even for train and validation, odd for
    test, so test can never share a game with either; below 2**31 as textworld's RNGs need.
    Train and validation are separate hash streams over 2**30 even seeds (a shared game is a
    one-in-a-billion chance per pair of tasks)."""
    digest = hashlib.blake2b(f"embodied|{seed}|{split}|{index}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") % 2**30) * 2 + (split == "test")


def game_path(cache_dir: str | Path, level: int, seed: int) -> Path:
    return Path(cache_dir) / f"level{level}-s{seed}" / GAME_FILE


def ensure_game(cache_dir: str | Path, level: int, seed: int) -> Path:
    """The cached game of (level, seed), generated first if missing. Generation writes into a
    temporary folder beside the cache entry and renames it into place, so a crash or a second
    process never leaves half a game behind."""
    path = game_path(cache_dir, level, seed)
    if path.is_file():
        return path
    settings = LEVELS[level]
    path.parent.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.parent.name}.", dir=path.parent.parent))
    try:
        textworld = import_textworld()
        options = textworld.GameOptions()
        options.seeds = seed
        options.nb_rooms = settings.world_size
        options.nb_objects = settings.nb_objects
        options.quest_length = settings.quest_length
        options.path = str(tmp / GAME_FILE)
        options.file_ext = ".z8"
        options.force_recompile = True
        # Quiet and offline: the generator and the bundled inform7 compiler need no network.
        sink = io.StringIO()
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(sink),
            contextlib.redirect_stderr(sink),
        ):
            warnings.simplefilter("ignore")
            game = textworld.generator.make_game(options)
            textworld.generator.compile_game(game, options)
        for extra in tmp.iterdir():  # keep the story file and its metadata only
            if extra.name not in (GAME_FILE, Path(GAME_FILE).with_suffix(".json").name):
                extra.unlink()
        for kept in tmp.iterdir():
            with open(kept, "rb") as handle:
                os.fsync(handle.fileno())
        tmp.chmod(0o755)  # mkdtemp's 0700 would hide a shared cache from other users
        try:
            tmp.rename(path.parent)
        except OSError:
            if not path.is_file():  # not a lost race with another writer: a real failure
                raise
    except TextWorldError:
        raise
    except Exception as exc:
        raise TextWorldError(
            f"could not generate the TextWorld game level {level}, seed {seed} into "
            f"{str(path.parent)!r}: {type(exc).__name__}: {exc}; check that textworld (with its "
            "bundled inform7) is installed and the cache folder is writable, and delete that "
            "folder if it is a leftover without its game file"
        ) from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def _game_info(path: Path) -> tuple[list[str], str]:
    """(walkthrough, objective) from the game's metadata file."""
    data = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
    return list(data["metadata"]["walkthrough"]), str(data.get("objective", "")).strip()


def make_task(cache_dir: str | Path, level: int, seed: int, split: str, index: int) -> Task:
    """The task of one game, with golds from replaying its walkthrough."""
    path = ensure_game(cache_dir, level, game_seed(seed, split, index))
    walkthrough, objective = _game_info(path)
    moves = walkthrough + [SLACK_COMMAND] * SLACK_MOVES
    states = [replay(path, moves[:i]) for i in range(len(moves) + 1)]
    if not states[len(walkthrough)].won:
        raise TextWorldError(
            f"the walkthrough of {str(path)!r} does not win its game; delete the game's folder "
            "to generate it again"
        )
    difficulty = min(5, max(1, level + 1))
    subtasks: list[Subtask] = []
    for i, command in enumerate(moves, start=1):
        subtasks.append(
            Subtask(
                id=f"a{i}",
                skill="embodied",
                difficulty=difficulty,
                input_tokens=300,
                output_tokens=8,
                depends_on=[f"o{i - 1}"] if i > 1 else [],
                gold=command,
                instruction=MOVE_INSTRUCTION if i > 1 else FIRST_MOVE_INSTRUCTION,
            )
        )
        subtasks.append(
            Subtask(
                id=f"o{i}",
                skill="game",
                difficulty=difficulty,
                input_tokens=20,
                output_tokens=150,
                depends_on=[f"a{i}"] + ([f"o{i - 1}"] if i > 1 else []),
                gold=states[i].render(),
                instruction=APPLY_INSTRUCTION,
            )
        )
    prompt = (
        "You are playing a text adventure game. Win it by issuing text commands, one per move; "
        "each move must be one of the admissible commands of the latest game state.\n\n"
    )
    if objective and objective not in states[0].observation:  # the intro usually states it
        prompt += f"Objective: {objective}\n\n"
    prompt += f"Initial game state:\n{states[0].render()}"
    return Task(
        id=f"embodied-{split}-{seed}-{index:06d}",
        suite="embodied",
        split=split,  # type: ignore[arg-type]
        family=f"level{level}",
        prompt=prompt,
        answer="won",
        subtasks=subtasks,
        budget_usd=BUDGET_USD,
        budget_s=BUDGET_S,
        metadata={
            "game_file": str(path),
            "walkthrough": walkthrough,
            "level": level,
            # moves after the walkthrough pass with any command once the game is won: profiling
            # skips them (they would count as successes of every executor)
            "uninformative": [f"a{i}" for i in range(len(walkthrough) + 1, len(moves) + 1)],
        },
    )


class EmbodiedSuite:
    name = "embodied"

    def __init__(
        self, cache_dir: str | Path = "data/textworld", levels: tuple[int, ...] = (1, 2, 3)
    ):
        unknown = [level for level in levels if level not in LEVELS]
        if not levels or unknown:
            raise ConfigError(
                f"embodied suite: levels must be a non-empty subset of {sorted(LEVELS)} "
                f"(got {list(levels)!r})"
            )
        self.cache_dir = Path(cache_dir)
        self.levels = tuple(levels)

    def tasks(self, split: str, n: int, seed: int, start: int = 0) -> Iterator[Task]:
        """Tasks `start` .. `start + n - 1` of `split`; the level cycles over `levels`. A task
        depends only on (seed, split, index), so shards can be made apart."""
        checked_split(self.name, split)
        for index in range(start, start + n):
            level = self.levels[index % len(self.levels)]
            yield make_task(self.cache_dir, level, seed, split, index)

    @staticmethod
    def _verified(task: Task, answer: str | None) -> GameState | None:
        """The state the answer's history really leads to, or None if it is no state block."""
        claimed = GameState.parse(answer)
        if claimed is None:
            return None
        game_file = check_game_file(task.metadata["game_file"])  # a missing game must be loud
        try:
            return replay(game_file, claimed.history)
        except TextWorldError:  # a forged history (an empty command): not a game state
            return None

    def check(self, task: Task, answer: str | None) -> bool:
        state = self._verified(task, answer)
        return state is not None and state.won

    def score(self, task: Task, answer: str | None) -> dict[str, float]:
        state = self._verified(task, answer)
        if state is None:
            return {"won": 0.0, "actions": 0.0, "game_score": 0.0}
        return {
            "won": float(state.won),
            "actions": float(len(state.history)),
            "game_score": float(state.score),
        }

    @staticmethod
    def check_subtask(task: Task, subtask: Subtask, output: str) -> bool:
        """Whether one step's output is right: a game state must equal the gold state; a move
        must be the walkthrough's, except that a slack move may be any admissible command (or,
        once the game is over, any command at all)."""
        if subtask.skill == "game":
            return output.strip() == subtask.gold.strip()
        command = normalize_command(output)
        if command == subtask.gold:
            return True
        index = int(subtask.id[1:])
        if index <= len(task.metadata["walkthrough"]) or not command:
            return False
        before = GameState.parse(task.subtask(f"o{index - 1}").gold)
        return before is not None and (before.over or command in before.admissible)
