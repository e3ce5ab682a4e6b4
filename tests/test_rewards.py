from __future__ import annotations

import pytest

from easy_core.core.params import RewardParams
from easy_core.core.reward import completeness, efficiency, reward
from easy_core.core.schemas import RunMetrics


def test_efficiency_normalises_cost_and_time_by_the_budget():
    m = RunMetrics(cost_usd=0.5, makespan_s=10.0)
    assert efficiency(m, budget_usd=1.0, budget_s=40.0, cost_share=0.5) == pytest.approx(
        1 - (0.25 + 0.125)
    )
    over = RunMetrics(cost_usd=5.0, makespan_s=500.0)
    assert efficiency(over, 1.0, 40.0, 0.5) == 0.0


def test_completeness_rewards_terminated_fully_executed_episodes():
    full = RunMetrics(n_steps=4)
    half = RunMetrics(n_steps=4, n_failed=1, n_skipped=1)
    assert completeness(full, terminated=True, repairs=0) == 1.0
    assert completeness(half, terminated=True, repairs=0) == 0.75
    assert completeness(full, terminated=False, repairs=0) == 0.5
    assert completeness(full, terminated=True, repairs=1) == 0.75
    assert completeness(RunMetrics(), terminated=False, repairs=3) == 0.0


def test_total_is_the_weighted_sum_and_components_are_kept():
    params = RewardParams(w_correct=1.0, w_efficiency=0.5, w_completeness=0.25, cost_share=1.0)
    r = reward(
        True,
        RunMetrics(cost_usd=0.25, n_steps=2),
        budget_usd=1.0,
        budget_s=1.0,
        terminated=True,
        repairs=0,
        params=params,
    )
    assert (r.correct, r.efficiency, r.completeness) == (1.0, 0.75, 1.0)
    assert r.total == pytest.approx(1.0 + 0.5 * 0.75 + 0.25 * 1.0)
