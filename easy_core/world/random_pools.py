"""Simulated pools drawn at random: the training ground for reading executor cards.

A policy trained on one pool can learn that pool's names instead of its cards; on a pool it
never saw (sim-unseen) it then picks by the look of a name. Pools drawn here vary everything a
card shows (names, how many executors, generalists, specialists, a tool, prices, speeds), so
the only way to plan well on all of them is to read the cards. Names come from a word list that
no shipped pool uses, and their suffixes say nothing a card does not (a "-mini" may be the
strongest executor).
"""

from __future__ import annotations

import random

from easy_core.core.schemas import DomainCapability, ExecutorProfile, LatencyModel, PoolConfig
from easy_core.world.suites.sim import SKILLS

NAME_WORDS = (
    "atlas", "birch", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "iris", "juniper",
    "kestrel", "lotus", "meridian", "nova", "onyx", "pine", "quartz", "raven", "sierra",
    "tundra", "umber", "vesper", "willow", "yarrow",
)  # fmt: skip
NAME_SUFFIXES = ("", "-mini", "-2", "-7b", "-pro", "-chat", "-api", "-lite", "-xl")
CONTEXT_WINDOWS = (4096, 8192, 16384, 32768, 65536, 131072, 200000)


ONSETS = "bdfgklmnprstvz"
VOWELS = "aeiou"


def fresh_names(rng: random.Random, count: int) -> list[str]:
    """`count` distinct names of 2-3 random syllables and a suffix (about 3 million of them):
    too many to remember, so a model trained on them must copy a name from the cards; a few
    dozen words are learnt by heart instead (docs/BENCHMARKS.md, "Levers of issue 27")."""
    names: list[str] = []
    while len(names) < count:
        syllables = rng.randint(2, 3)
        word = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) for _ in range(syllables))
        name = word + rng.choice(NAME_SUFFIXES)
        if name not in names:
            names.append(name)
    return names


def random_names(rng: random.Random, count: int) -> list[str]:
    """`count` distinct executor names that no shipped pool uses."""
    return [f"{word}{rng.choice(NAME_SUFFIXES)}" for word in rng.sample(NAME_WORDS, count)]


def drawn_names(rng: random.Random, count: int, fresh: bool) -> list[str]:
    """`count` executor names: `fresh_names` when `fresh`, else `random_names`."""
    return fresh_names(rng, count) if fresh else random_names(rng, count)


def random_pool(rng: random.Random, name: str = "sim-random", fresh: bool = False) -> PoolConfig:
    """A simulated pool of 4 to 6 executors: generalists whose price and slowness grow with
    their strength, possibly a specialist (strong at one skill) and a tool (near-perfect at
    one skill, near-useless elsewhere, almost free). Named by `fresh_names` when `fresh`, else
    from the short word list."""
    count = rng.randint(4, 6)
    kinds = ["generalist"] * count
    kinds[0] = rng.choice(["generalist", "specialist", "tool"])
    kinds[1] = rng.choice(["generalist", "generalist", "specialist"])
    names = drawn_names(rng, count, fresh)
    profiles = [_profile(rng, name_, kind) for name_, kind in zip(names, kinds, strict=True)]
    rng.shuffle(profiles)
    return PoolConfig(name=name, description="a pool drawn by easy_core.random_pools",
                      executors=profiles)  # fmt: skip


def _profile(rng: random.Random, name: str, kind: str) -> ExecutorProfile:
    strength = rng.uniform(0.45, 0.95) if kind == "generalist" else rng.uniform(0.45, 0.8)
    success = {skill: _clip(strength + rng.gauss(0.0, 0.05)) for skill in SKILLS}
    if kind == "specialist":
        success[rng.choice(SKILLS)] = rng.uniform(0.88, 0.97)
    if kind == "tool":
        success = {skill: rng.uniform(0.01, 0.06) for skill in SKILLS}
        success[rng.choice(SKILLS)] = rng.uniform(0.95, 0.99)
        strength = 0.3
    # 0.45 -> ~$0.03/1M in, 0.95 -> ~$6/1M: the 200x spread of the shipped ladders
    level = max(0.0, (strength - 0.45) / 0.5)
    price_in = 0.03 * 200**level * rng.lognormvariate(0.0, 0.3)
    if kind == "tool":
        price_in = rng.uniform(0.01, 0.05)
    return ExecutorProfile(
        name=name,
        backend="sim",
        description=f"drawn {kind}",
        price_in_per_1m=round(price_in, 3),
        price_out_per_1m=round(price_in * rng.uniform(1.0, 3.0), 3),
        latency=LatencyModel(
            ttft_s=round(0.03 + 0.7 * level * rng.uniform(0.7, 1.3), 2),
            tokens_per_s=round(300 * 0.1**level * rng.uniform(0.8, 1.25)) + 5
            if kind != "tool"
            else rng.choice([800, 1500, 3000]),
        ),
        context_window=CONTEXT_WINDOWS[min(len(CONTEXT_WINDOWS) - 1, int(level * 6.99))],
        max_concurrency=rng.choice([2, 4, 6, 8, 16]),
        self_check_reliability=round(_clip(0.55 + 0.4 * strength + rng.gauss(0, 0.03)), 2),
        capability={
            skill: DomainCapability(success=round(rate, 2), n=500)
            for skill, rate in success.items()
        },  # fmt: skip
    )


def _clip(rate: float) -> float:
    return min(0.99, max(0.02, rate))
