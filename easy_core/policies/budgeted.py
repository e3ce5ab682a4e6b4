"""The decision rule the learned policies share: per subtask, the executor that maximises
predicted log success minus the price of its cost and time,

    log p(e, t) - cost_weight * cost(e, t) / budget_usd - time_weight * latency(e, t) / budget_s

Task success is (about) the product of the subtasks' successes, so log success adds up over
subtasks and the best plan is the best choice per subtask. Equivalently: walking up each
subtask's options from the cheapest, an upgrade is taken while its gain in log success per unit
of cost is above the weights: the "progress gain per cost" rule. Then the plan must fit what is
left of the cost budget: while its worst-case cost does not, the subtask whose downgrade loses
the least log success per dollar saved is downgraded.
"""

from __future__ import annotations

import math
from typing import NamedTuple


class Candidate(NamedTuple):
    executor: str
    success: float  # predicted
    cost: float
    latency: float


def utility(
    c: Candidate, cost_weight: float, time_weight: float, budget_usd: float, budget_s: float
) -> float:
    return (
        math.log(max(c.success, 1e-6))
        - cost_weight * c.cost / max(budget_usd, 1e-12)
        - time_weight * c.latency / max(budget_s, 1e-9)
    )


def choose(
    candidates: dict[str, list[Candidate]],
    *,
    cost_weight: float,
    time_weight: float,
    budget_usd: float,
    budget_s: float,
    remaining_usd: float,
) -> dict[str, Candidate]:
    """The executor for each subtask (keys of `candidates`), within `remaining_usd`."""

    def score(c: Candidate) -> float:
        return utility(c, cost_weight, time_weight, budget_usd, budget_s)

    chosen = {sub: max(options, key=score) for sub, options in candidates.items()}
    total = sum(c.cost for c in chosen.values())
    while total > remaining_usd:
        best: tuple[float, str, Candidate] | None = None
        for sub, current in chosen.items():
            for option in candidates[sub]:
                saved = current.cost - option.cost
                if saved <= 0:
                    continue
                loss = math.log(max(current.success, 1e-6)) - math.log(max(option.success, 1e-6))
                ratio = loss / saved
                if best is None or ratio < best[0]:
                    best = (ratio, sub, option)
        if best is None:
            break  # everything is already at its cheapest; the engine's ledger has the last word
        _, sub, option = best
        total -= chosen[sub].cost - option.cost
        chosen[sub] = option
    return chosen
