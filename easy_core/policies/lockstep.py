"""Episodes of the in-process `easy` policy advanced in lockstep: each round, every episode
still running takes one orchestrator turn, and the turns of up to `orchestrator.batch_size`
episodes come from one batched `generate` call, which costs less per row than one call each.
The episodes are the ones `EpisodeRunner.run` plays (same tasks, seeds and discrete-event
clock); only the orchestrator's calls are grouped."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from easy_core.core.clock import DiscreteEventClock, run_synchronously
from easy_core.core.params import OrchestratorParams
from easy_core.core.schemas import Task, Trajectory
from easy_core.policies.llm import generate_hf_batch, record_answer, turn_inputs
from easy_core.runtime.episode import EpisodeCursor, EpisodeRunner
from easy_core.runtime.policy import EpisodeState


class _PreparedAnswer:
    """Plays one answer generated for the episode's current turn."""

    name = "easy"

    def __init__(self, text: str, tokens: int):
        self.text, self.tokens = text, tokens

    async def act(self, state: EpisodeState) -> str:
        return record_answer(state, self.text, self.tokens)


def run_lockstep(
    tasks: Iterable[Task],
    runner: EpisodeRunner,
    seed: int,
    settings: OrchestratorParams,
    on_episode: Callable[[int], None] | None = None,
) -> list[Trajectory]:
    cursors = [runner.start(task, seed, DiscreteEventClock()) for task in tasks]
    running: list[EpisodeCursor] = list(cursors)
    while running:
        still: list[EpisodeCursor] = []
        for first in range(0, len(running), settings.batch_size):
            batch = running[first : first + settings.batch_size]
            inputs = [turn_inputs(cursor.state) for cursor in batch]
            answers = generate_hf_batch(
                [messages for messages, _ in inputs],
                settings,
                [schema for _, schema in inputs],
                f"{seed}|lockstep|{batch[0].task.id}|{len(batch[0].state.milestones)}",
            )
            for cursor, (text, tokens) in zip(batch, answers, strict=True):
                if run_synchronously(cursor.turn(_PreparedAnswer(text, tokens))):
                    still.append(cursor)
                elif on_episode is not None:
                    on_episode(1)
        running = still
    return [cursor.trajectory("easy") for cursor in cursors]
