"""The in-process `easy` policy's episodes advanced in lockstep, with batched turns: the same
episodes as one at a time, whoever writes the answers."""

from __future__ import annotations

from easy_core.core.clock import run_synchronously
from easy_core.core.params import Params
from easy_core.executors.pool import load_pool
from easy_core.plans.prompting import plan_text
from easy_core.policies import get_policy, lockstep
from easy_core.policies.batch import run_episodes
from easy_core.runtime.episode import EpisodeRunner
from easy_core.world.suites.sim import SimSuite
from tests.conftest import SIM_DEFAULT


def test_lockstep_plays_the_episodes_one_at_a_time_would(params: Params, monkeypatch) -> None:
    """Answers written by `greedy` for each episode's state, batched four at a time, give
    greedy's own episodes; every turn's tokens are counted."""
    greedy = get_policy("greedy")
    batches: list[int] = []

    def greedy_batch(states, settings, schemas, sample_key):
        batches.append(len(states))
        return [(plan_text(run_synchronously(greedy.act(s))), 7) for s in states]

    monkeypatch.setattr(lockstep, "turn_inputs", lambda state: (state, None))
    monkeypatch.setattr(lockstep, "generate_hf_batch", greedy_batch)
    pool = load_pool(SIM_DEFAULT, params)
    runner = EpisodeRunner(pool, params, SimSuite.check)
    tasks = list(SimSuite(params.sim).tasks("test", 10, 0))
    settings = params.orchestrator.model_copy(update={"batch_size": 4})
    done: list[int] = []
    batched = lockstep.run_lockstep(tasks, runner, 0, settings, done.append)
    alone = run_episodes(tasks, runner, "greedy", 0)
    assert [t.task_id for t in batched] == [t.task_id for t in alone]
    assert [t.reward.total for t in batched] == [t.reward.total for t in alone]
    assert [t.end_reason for t in batched] == [t.end_reason for t in alone]
    assert batches[0] == 4 and max(batches) == 4 and sum(done) == 10
    assert all(t.metrics.orchestrator_tokens % 7 == 0 for t in batched)
    assert all(t.policy == "easy" and t.metrics.orchestrator_tokens > 0 for t in batched)


def test_only_greedy_decoding_is_batched_in_lockstep(params: Params, monkeypatch) -> None:
    """A sampled turn is seeded per episode, which a batch cannot keep: at a temperature above
    0 the episodes run one at a time."""
    calls: list[float] = []

    def spy(tasks, runner, seed, settings, on_episode):
        calls.append(settings.temperature)
        return []

    monkeypatch.setattr(lockstep, "run_lockstep", spy)
    for temperature in (0.0, 0.7):
        settings = params.orchestrator.model_copy(
            update={"backend": "hf", "batch_size": 4, "temperature": temperature}
        )
        run = params.model_copy(update={"orchestrator": settings})
        runner = EpisodeRunner(load_pool(SIM_DEFAULT, run), run, SimSuite.check)
        assert run_episodes([], runner, "easy", 0) == []
    assert calls == [0.0]
