"""Small statistics helpers for reported figures."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a success rate."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile (q in 0..1), linearly interpolated between order statistics (numpy's
    default); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def paired_difference(
    before: list[float], after: list[float], resamples: int = 10_000, seed: int = 0
) -> tuple[float, tuple[float, float]]:
    """Mean of `after - before` over paired observations (the same tasks) and its 95%
    percentile bootstrap interval."""
    import numpy as np

    if len(before) != len(after) or not before:
        raise ValueError("paired_difference needs two equally long, non-empty lists")
    diffs = np.asarray(after, dtype=float) - np.asarray(before, dtype=float)
    means = diffs[_resampled_units(len(diffs), resamples, seed)].mean(axis=1)
    return float(diffs.mean()), _percentile_interval(means)


def mean_interval(
    values: list[float], resamples: int = 10_000, seed: int = 0
) -> tuple[float, tuple[float, float]]:
    """Mean of `values` (a graded score per task, say) and its 95% percentile bootstrap
    interval."""
    import numpy as np

    if not values:
        raise ValueError("mean_interval needs a non-empty list")
    array = np.asarray(values, dtype=float)
    means = array[_resampled_units(len(array), resamples, seed)].mean(axis=1)
    return float(array.mean()), _percentile_interval(means)


def ratio_of_sums(
    numerators: list[float], denominators: list[float], resamples: int = 10_000, seed: int = 0
) -> tuple[float, tuple[float, float]]:
    """sum(numerators) / sum(denominators) over paired units (e.g. tasks) and its 95%
    percentile bootstrap interval, the units resampled with replacement."""
    import numpy as np

    if len(numerators) != len(denominators) or not numerators:
        raise ValueError("ratio_of_sums needs two equally long, non-empty lists")
    top, bottom = np.asarray(numerators, dtype=float), np.asarray(denominators, dtype=float)
    if bottom.sum() <= 0:
        raise ValueError("ratio_of_sums needs denominators with a positive sum")
    picks = _resampled_units(len(top), resamples, seed)
    ratios = top[picks].sum(axis=1) / np.maximum(bottom[picks].sum(axis=1), 1e-12)
    return float(top.sum() / bottom.sum()), _percentile_interval(ratios)


def _resampled_units(n: int, resamples: int, seed: int) -> Any:
    """Bootstrap draws: `resamples` rows of `n` unit indices drawn with replacement."""
    import numpy as np

    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def _percentile_interval(estimates: Any) -> tuple[float, float]:
    """The 95% percentile interval of bootstrap estimates."""
    import numpy as np

    low, high = np.percentile(estimates, [2.5, 97.5])
    return float(low), float(high)
