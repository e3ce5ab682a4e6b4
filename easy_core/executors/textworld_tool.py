"""The `textworld` tool: plays one move of a TextWorld game, statelessly.

A step carries the whole game in its text: the previous state block (the output of an earlier
`textworld` step) holds the command history, so the tool replays history + the new command in
a fresh game and answers with the new state block. No session lives between steps, which keeps
steps retryable, cacheable and independent of which worker runs them; a replay costs
milliseconds (a few Z-machine moves), so statelessness is cheap.

`replay` is shared with the `embodied` suite, which uses it for gold states and for checking
answers, so golds and tool outputs are the same function of (game, commands).
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from easy_core.errors import EasyError
from easy_core.executors.base import StepRequest, approx_tokens, step_result
from easy_core.runtime.clock import VirtualTimeLoop
from easy_core.schemas import ExecutorProfile, StepResult

OBSERVATION_CHARS = 800
OUTPUT_TOKEN_CAP = 1024  # a trimmed observation + admissible list stay far below this
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


# --------------------------------------------------------------------------- commands


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


# --------------------------------------------------------------------------- state blocks


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


# --------------------------------------------------------------------------- replay


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


# --------------------------------------------------------------------------- executor


class TextWorldExecutor:
    """The `textworld` tool backend. Its input: the previous state block (from the dependency
    whose output parses as one; none means the start of the game) and the command (the first
    other dependency's output). Its output: the new state block. A move takes ~5-15 ms (the
    first one in a process ~0.2 s more), so a profile `ttft_s` of 0.2-0.5 s is ample."""

    def __init__(self, profile: ExecutorProfile):
        self.profile = profile
        import_textworld()  # pay the ~1 s import when the pool is built, not in a timed step

    async def run(self, request: StepRequest) -> StepResult:
        started = time.monotonic()
        command = ""
        try:
            game_file, history, command = self._move(request)
            if isinstance(asyncio.get_running_loop(), VirtualTimeLoop):
                # Virtual time would jump to the step's timeout while a thread works; the
                # replay is a few milliseconds of CPU, so run it on the loop instead.
                state = replay(game_file, [*history, command])
            else:
                state = await asyncio.to_thread(replay, game_file, [*history, command])
            status, output, error = "ok", state.render(), None
        except TextWorldError as exc:
            status, output, error = "failed", "", str(exc)
        tokens_in, tokens_out = approx_tokens(command), max(1, approx_tokens(output))
        return step_result(
            self.profile,
            request,
            status=status,
            output=output,
            error=error,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            latency_s=time.monotonic() - started,
        )

    @staticmethod
    def _move(request: StepRequest) -> tuple[str, tuple[str, ...], str]:
        """(game file, history so far, new command) from the request, or a TextWorldError."""
        game_file = request.task.metadata.get("game_file")
        if not game_file:
            raise TextWorldError(
                f"task {request.task.id!r} has no metadata['game_file']; the textworld tool "
                "plays only tasks of the embodied suite"
            )
        states, others = [], []
        for result in request.inputs:
            state = GameState.parse(result.output)
            if state is not None:
                states.append(state)
            else:
                others.append(result)
        # Several state blocks: continue the furthest game.
        history = max(states, key=lambda s: len(s.history)).history if states else ()
        command = normalize_command(others[0].output) if others else ""
        if not command:
            raise TextWorldError(
                f"step {request.step_id!r} got no command: give it a dependency whose output "
                "is the command to apply (and, after the first move, one that outputs the "
                "previous game state)"
            )
        return str(game_file), history, command

    def estimate_input_tokens(self, request: StepRequest) -> int:
        return max(1, sum(approx_tokens(result.output) for result in request.inputs))

    def output_token_cap(self, request: StepRequest) -> int:
        # The new block repeats the previous one's history, plus one move's text.
        return OUTPUT_TOKEN_CAP + self.estimate_input_tokens(request)
