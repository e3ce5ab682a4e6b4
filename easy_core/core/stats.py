"""Small statistics helpers for reported figures."""

from __future__ import annotations

import math
from collections.abc import Sequence


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
    rng = np.random.default_rng(seed)
    means = diffs[rng.integers(0, len(diffs), size=(resamples, len(diffs)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(diffs.mean()), (float(low), float(high))


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
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(top), size=(resamples, len(top)))
    ratios = top[picks].sum(axis=1) / np.maximum(bottom[picks].sum(axis=1), 1e-12)
    low, high = np.percentile(ratios, [2.5, 97.5])
    return float(top.sum() / bottom.sum()), (float(low), float(high))
