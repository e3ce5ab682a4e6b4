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
import time

from easy_core.core.clock import VirtualTimeLoop
from easy_core.core.schemas import ExecutorProfile, StepRequest, StepResult, approx_tokens
from easy_core.executors.base import step_result
from easy_core.world.games import (
    GameState,
    TextWorldError,
    import_textworld,
    normalize_command,
    replay,
)

OUTPUT_TOKEN_CAP = 1024  # a trimmed observation + admissible list stay far below this


class TextWorldExecutor:
    """The `textworld` tool backend. Its input: the previous state block (from the dependency
    whose output parses as one; none means the start of the game) and the command (the first
    other dependency's output). Its output: the new state block. A move takes ~5-15 ms (the
    first one in a process ~0.2 s more), so a profile `ttft_s` of 0.2-0.5 s is ample."""

    def __init__(self, profile: ExecutorProfile):
        self.profile = profile
        import_textworld()  # pay the ~1 s import when the pool is built, not in a timed step

    async def run(self, request: StepRequest) -> StepResult:
        if isinstance(asyncio.get_running_loop(), VirtualTimeLoop):
            # Virtual time would jump to the step's timeout while a thread works; the
            # replay is a few milliseconds of CPU, so run it on the loop instead.
            return self.simulate(request)
        return await asyncio.to_thread(self.simulate, request)

    def simulate(self, request: StepRequest) -> StepResult:
        """The move, played synchronously: the tool is deterministic and takes milliseconds, so
        an episode whose other executors are replayed can run on the virtual clock."""
        started = time.monotonic()
        command = ""
        try:
            game_file, history, command = self._move(request)
            state = replay(game_file, [*history, command])
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
