"""TextWorld games: loading the engine, replaying a command history from the start (the state a
command sees), cleaning the interpreter's feedback. The `embodied` suite uses `replay` for gold
states and checks; the `textworld` executor uses it to run a step.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from easy_core.core.errors import EasyError

OBSERVATION_CHARS = 800


GAME_OVER_NOTE = "the game is over; later commands were not applied"


NONE = "(none)"


# Interpreter meta commands would leave the game at a yes/no prompt or end the interpreter:
# they are recorded as moves but never sent to the game.
META_COMMANDS = frozenset(
    {"quit", "q", "restart", "restore", "save", "script", "unscript", "transcript", "noscript"}
)


_BANNER_LINE = re.compile(r"[\s_|\\/$<>]+")


_TRAILING_PROMPT = re.compile(r">[^\n]*\Z")  # the input prompt and the interpreter status bar


_END_QUESTION = re.compile(r"Would you like to RESTART, RESTORE a saved game.*", re.DOTALL)


_FENCE = re.compile(r"^`{3,}\w*$")


_COMMAND_PREFIX = re.compile(r"^(?:>\s*|(?:command|action)\s*:\s*)", re.IGNORECASE)


class TextWorldError(EasyError):
    """A TextWorld game cannot be made, found or played."""


def import_textworld() -> Any:
    """Import textworld on first use: it is heavy and only the embodied suite needs it."""
    try:
        import textworld
        import textworld.generator  # noqa: F401  (registers the generator API)
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise TextWorldError(
            "the textworld tool and the embodied suite need the `textworld` package: "
            "pip install textworld==1.7.0"
        ) from exc
    return textworld


def normalize_command(text: str) -> str:
    """The command in an executor's answer: its first line that is not a code fence, without
    quotes, backticks, a `>` or `command:` prefix and trailing punctuation; lower case, single
    spaces. `|` is dropped because it separates commands in the history."""
    line = ""
    for raw in text.strip().splitlines():
        candidate = raw.strip()
        if candidate and not _FENCE.match(candidate):
            line = candidate
            break
    line = _COMMAND_PREFIX.sub("", line).lstrip("`\"'* ").rstrip("`\"'*.!?;:, ")
    line = line.replace("|", " ")
    return " ".join(line.lower().split())


def clean_feedback(text: str) -> str:
    """Game feedback without the title banner, the input prompt and status bar, and the
    interpreter's restart question; blank runs collapsed; at most `OBSERVATION_CHARS`."""
    text = _END_QUESTION.sub("", _TRAILING_PROMPT.sub("", text.replace("\r", "")))
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if not line or not _BANNER_LINE.fullmatch(line)]
    cleaned = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    if len(cleaned) > OBSERVATION_CHARS:
        cleaned = cleaned[: OBSERVATION_CHARS - 3].rstrip() + "..."
    return cleaned


@dataclass(frozen=True, slots=True)
class GameState:
    """What the tool answers: the game after `history`, as a plain-text block that the next
    step (an LLM choosing a move, or the tool itself) reads back."""

    history: tuple[str, ...]
    observation: str
    admissible: tuple[str, ...]
    score: int
    max_score: int
    won: bool
    lost: bool
    note: str = ""

    @property
    def over(self) -> bool:
        return self.won or self.lost

    def render(self) -> str:
        lines = [
            f"history: {' | '.join(self.history) or NONE}",
            f"observation: {self.observation}",
            f"admissible: {', '.join(self.admissible) or NONE}",
            f"score: {self.score}/{self.max_score}",
            f"won: {str(self.won).lower()}",
            f"lost: {str(self.lost).lower()}",
        ]
        if self.note:
            lines.append(f"note: {self.note}")
        return "\n".join(lines)

    @classmethod
    def parse(cls, text: str | None) -> GameState | None:
        """The state in a rendered block, or None when `text` is not one. Fixed lines are read
        from both ends, so whatever the observation says cannot confuse the parser."""
        lines = (text or "").strip().splitlines()
        note = ""
        if lines and lines[-1].startswith("note: "):
            note = lines.pop()[len("note: ") :].strip()
        if len(lines) < 6 or not lines[0].startswith("history:"):
            return None
        tail = lines[-4:]
        keys = ("admissible:", "score:", "won:", "lost:")
        if not all(line.startswith(key) for line, key in zip(tail, keys, strict=True)):
            return None
        observation = "\n".join(lines[1:-4])
        if not observation.startswith("observation:"):
            return None
        values = [line.split(":", 1)[1].strip() for line in tail]
        score_text, _, max_text = values[1].partition("/")
        flags = values[2], values[3]
        if not (score_text.lstrip("-").isdigit() and max_text.lstrip("-").isdigit()):
            return None
        if not all(flag in ("true", "false") for flag in flags):
            return None
        history = lines[0][len("history:") :].strip()
        return cls(
            history=() if history == NONE else tuple(history.split(" | ")),
            observation=observation[len("observation:") :].strip(),
            admissible=() if values[0] == NONE else tuple(values[0].split(", ")),
            score=int(score_text),
            max_score=int(max_text),
            won=flags[0] == "true",
            lost=flags[1] == "true",
            note=note,
        )


def check_game_file(game_file: str | Path) -> Path:
    """The game file, or a TextWorldError saying what is missing and how to get it."""
    path = Path(game_file)
    if not path.is_file():
        raise TextWorldError(
            f"TextWorld game file {str(path)!r} does not exist; generate it again with "
            "EmbodiedSuite(cache_dir=...).tasks(...) (games are cached under the suite's "
            "cache_dir) or fix the task's metadata['game_file']"
        )
    if not path.with_suffix(".json").is_file():
        raise TextWorldError(
            f"TextWorld game {str(path)!r} lacks its companion {path.with_suffix('.json').name} "
            "(admissible commands and scores come from it); delete the game's folder and let "
            "the embodied suite generate it again"
        )
    return path


class _EnvPool:
    """Idle game environments by game file, reused across replays (`reset` takes ~3 ms;
    a fresh environment ~15 ms and a copy of the interpreter library that is never unloaded).
    An environment is leased to one replay at a time, so replays can run in threads."""

    def __init__(self, max_games: int = 16, per_game: int = 4):
        self.max_games = max_games
        self.per_game = per_game
        self._idle: OrderedDict[str, list[Any]] = OrderedDict()
        self._lock = threading.Lock()

    @contextmanager
    def lease(self, game_file: str) -> Iterator[Any]:
        with self._lock:
            idle = self._idle.get(game_file)
            env = idle.pop() if idle else None
        if env is None:
            textworld = import_textworld()
            infos = textworld.EnvInfos(
                admissible_commands=True, won=True, lost=True, score=True, max_score=True
            )
            env = textworld.start(game_file, request_infos=infos)
        try:
            yield env
        except BaseException:
            env.close()
            raise
        evicted: list[Any] = []
        with self._lock:
            idle = self._idle.setdefault(game_file, [])
            self._idle.move_to_end(game_file)
            if len(idle) < self.per_game:
                idle.append(env)
            else:
                evicted.append(env)
            while len(self._idle) > self.max_games:
                evicted.extend(self._idle.popitem(last=False)[1])
        for old in evicted:
            old.close()


_ENVS = _EnvPool()


def replay(game_file: str | Path, commands: Sequence[str]) -> GameState:
    """The game after playing `commands` from its start. Commands are normalised; one that
    is not admissible is still sent (the game answers it) and recorded; once the game is won
    or lost the rest are dropped and the state says so. Deterministic, hence cached."""
    normalized = tuple(normalize_command(command) for command in commands)
    if not all(normalized):
        raise TextWorldError(f"empty command in {list(commands)!r}; every move needs a command")
    return _replay(str(check_game_file(game_file)), normalized)


@lru_cache(maxsize=4096)
def _replay(game_file: str, commands: tuple[str, ...]) -> GameState:
    with _ENVS.lease(game_file) as env:
        state = env.reset()
        feedback, applied, note = state.feedback, [], ""
        for command in commands:
            if state.won or state.lost:
                note = GAME_OVER_NOTE
                break
            applied.append(command)
            if command.split()[0] in META_COMMANDS:
                feedback = f"The command {command!r} is not available in this game."
                continue
            state, _, _ = env.step(command)
            feedback = state.feedback
        over = bool(state.won or state.lost)
        return GameState(
            history=tuple(applied),
            observation=clean_feedback(feedback),
            admissible=() if over else tuple(sorted(state.admissible_commands or ())),
            score=int(state.score or 0),
            max_score=int(state.max_score or 0),
            won=bool(state.won),
            lost=bool(state.lost),
            note=note,
        )
