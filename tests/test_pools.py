from __future__ import annotations

from easy_core.core.capability import expected_success


def price(profile):
    return profile.price_in_per_1m + profile.price_out_per_1m


def mean_capability(profile):
    return sum(c.success for c in profile.capability.values()) / len(profile.capability)


def test_sim_default_ladder(pool):
    ladder = [pool.profile(f"sim-{size}") for size in ("xs", "s", "m", "l", "xl")]
    assert price(ladder[-1]) / price(ladder[0]) >= 30
    for small, large in zip(ladder, ladder[1:], strict=False):
        assert price(small) < price(large)
        assert mean_capability(small) < mean_capability(large)
        assert small.latency.tokens_per_s > large.latency.tokens_per_s
        assert small.latency.ttft_s < large.latency.ttft_s
        for skill in small.capability:
            assert small.success_rate(skill) < large.success_rate(skill)


def test_sim_tool_is_cheap_and_good_at_one_skill_only(pool):
    tool = pool.profile("sim-tool")
    assert price(tool) < price(pool.profile("sim-xs"))
    strong = [s for s, c in tool.capability.items() if c.success > 0.95]
    assert len(strong) == 1
    assert all(c.success < 0.1 for s, c in tool.capability.items() if s not in strong)


def test_unseen_pool_has_other_names_and_profiles(pool, unseen_pool):
    assert set(pool.executors).isdisjoint(unseen_pool.executors)
    assert {p.model_dump_json() for p in pool.profiles}.isdisjoint(
        {p.model_dump_json() for p in unseen_pool.profiles}
    )
    assert set(unseen_pool.profiles[0].capability) == set(pool.profiles[0].capability)


def test_difficulty_shifts_expected_success(pool):
    m = pool.profile("sim-m")
    easy, mid, hard = (expected_success(m, "code", d, 0.6) for d in (1, 3, 5))
    assert easy > mid > hard
    assert mid == m.success_rate("code")


def test_executor_card_lists_price_speed_context_and_skills(pool):
    card = pool.profile("sim-xl").card()
    for text in ("sim-xl", "$3/1M in", "$6/1M out", "45 tok/s", "context 131072", "code 93%"):
        assert text in card


def test_measured_cards_replace_the_priors_but_not_the_simulated_world(params, tmp_path):
    """A pool takes its cards from the profile stage's measurement of it; its simulated world
    keeps drawing from the pool file's own values (the truth the measurement estimates)."""
    import yaml

    from easy_core.core.clock import DiscreteEventClock, run_synchronously
    from easy_core.executors.pool import load_pool
    from easy_core.policies import get_policy
    from easy_core.runtime.episode import EpisodeRunner
    from easy_core.world.suites.sim import SimSuite
    from tests.conftest import SIM_DEFAULT

    measured = {
        "pool": "sim-default",
        "suites": ["sim"],
        "n_tasks": 5,
        "seed": 0,
        "executors": {"sim-xs": {"capability": {"code": {"success": 0.99, "n": 7}}}},
    }
    (tmp_path / "sim-default.yaml").write_text(yaml.safe_dump(measured))
    profile = params.profile.model_copy(update={"out_dir": str(tmp_path), "apply": True})
    carded = load_pool(SIM_DEFAULT, params.model_copy(update={"profile": profile}))
    priors = load_pool(SIM_DEFAULT, params)
    card = {p.name: p for p in carded.profiles}["sim-xs"].capability["code"]
    assert (card.success, card.n) == (0.99, 7)
    assert {p.name: p for p in priors.profiles}["sim-xs"].capability["code"].n == 1000
    # the same plan has the same outcomes in both worlds, and the oracle reads the truth
    tasks = list(SimSuite(params.sim).tasks("test", 30, 0))
    for task in tasks:
        runs = [
            run_synchronously(
                EpisodeRunner(p, params, SimSuite.check).run(
                    task, get_policy("cheapest"), 0, DiscreteEventClock()
                )
            )
            for p in (carded, priors)
        ]
        assert runs[0] == runs[1]
    runner = EpisodeRunner(carded, params, SimSuite.check)
    assert runner._profiles["sim-xs"].capability["code"].n == 1000
    off = profile.model_copy(update={"apply": False})
    unapplied = load_pool(SIM_DEFAULT, params.model_copy(update={"profile": off}))
    assert {p.name: p for p in unapplied.profiles}["sim-xs"].capability["code"].n == 1000
