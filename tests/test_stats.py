"""The intervals reported with benchmark figures."""

from __future__ import annotations

import pytest

from easy_core.core.stats import paired_difference, ratio_of_sums, wilson_interval


def test_paired_difference_is_the_mean_gain_with_an_interval_around_it() -> None:
    before = [0.5, 0.4, 0.9, 0.1, 0.6, 0.3, 0.7, 0.2]
    after = [b + 0.1 for b in before]
    mean, (low, high) = paired_difference(before, after)
    assert mean == pytest.approx(0.1) and low == pytest.approx(0.1) and high == pytest.approx(0.1)
    noisy = [b + d for b, d in zip(before, [0.3, -0.1, 0.2, 0.0, 0.4, -0.2, 0.1, 0.1], strict=True)]
    mean, (low, high) = paired_difference(before, noisy)
    assert low < mean < high and mean == pytest.approx(0.1)
    assert low < 0.0  # eight noisy pairs do not make a sure gain
    with pytest.raises(ValueError):
        paired_difference([1.0], [1.0, 2.0])


def test_wilson_interval_brackets_the_rate() -> None:
    low, high = wilson_interval(30, 50)
    assert low < 0.6 < high and (round(low, 2), round(high, 2)) == (0.46, 0.72)


def test_ratio_of_sums_weighs_units_by_size_and_brackets_the_spread() -> None:
    ratio, (low, high) = ratio_of_sums([1.0, 2.0, 3.0], [2.0, 4.0, 6.0])
    assert ratio == low == high == pytest.approx(0.5)  # every task the same ratio
    tree, independent = [800.0, 3000.0, 900.0, 1200.0], [1500.0, 9000.0, 2000.0, 2400.0]
    ratio, (low, high) = ratio_of_sums(tree, independent)
    assert ratio == pytest.approx(5900 / 14900)  # a ratio of totals, not a mean of ratios
    assert low < ratio < high and high - low > 0.05
    with pytest.raises(ValueError):
        ratio_of_sums([1.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        ratio_of_sums([1.0], [0.0])
