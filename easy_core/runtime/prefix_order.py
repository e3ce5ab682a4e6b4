"""Prefix-aware ordering: steps for the same executor that share a prompt prefix run back to
back, so the server's prefix cache (vLLM `--enable-prefix-caching`, llama.cpp `cache_prompt`)
prefills the shared part once.

Every step of a task begins with the same prefix (the system prompt and the task's context);
when many workflows share an executor, a FIFO queue interleaves their steps and each one evicts
the others' prefixes from a small cache. `prefix` ordering serves, among the queued steps, one
whose prefix is cached first (oldest first among those), and falls back to FIFO; a step passed
over `max_bypass` times goes next whatever its prefix, so no workflow starves.

`prefix_benchmark` is a discrete-event simulation of that: concurrent sim workflows (one step per
subtask, executors chosen by `greedy`), each executor a server with `max_concurrency` lanes and an
LRU prefix cache of `cache_tokens`; a cache hit prefills the prefix `cached_speedup` times faster
and bills it at `cached_price` of the input price (what hosted APIs charge for cached input).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol


class PrefixCache:
    """An LRU cache of prompt prefixes, bounded in tokens and, if `max_entries` is set, in
    prompts (llama-cpp-python's server without its RAM cache keeps exactly one: the last)."""

    def __init__(self, capacity_tokens: int, max_entries: int | None = None):
        self.capacity = capacity_tokens
        self.max_entries = max_entries
        self.entries: OrderedDict[str, int] = OrderedDict()
        self.used = 0

    def __contains__(self, key: str) -> bool:
        return key in self.entries

    def touch(self, key: str, tokens: int) -> bool:
        """Use a prefix; True if it was cached. It becomes the most recent entry."""
        if key in self.entries:
            self.entries.move_to_end(key)
            return True
        if tokens > self.capacity:
            return False
        while self.used + tokens > self.capacity or (
            self.max_entries is not None and len(self.entries) >= self.max_entries
        ):
            _, size = self.entries.popitem(last=False)
            self.used -= size
        self.entries[key] = tokens
        self.used += tokens
        return False


@dataclass(order=True)
class QueuedStep:
    ready: float
    seq: int
    workflow: int = field(compare=False)
    sub_id: str = field(compare=False)
    prefix: str = field(compare=False)
    prefix_tokens: int = field(compare=False)
    own_tokens: int = field(compare=False)
    out_tokens: int = field(compare=False)
    bypassed: int = field(default=0, compare=False)


class Queued(Protocol):
    """A waiting step as the rule sees it: a simulated `QueuedStep`, or a `SlotTicket` of the
    service's dispatcher (the same rule runs both)."""

    prefix: str
    bypassed: int


def next_step(queue: Sequence[Queued], cache: PrefixCache, order: str, max_bypass: int) -> int:
    """Index in `queue` (kept in arrival order) of the step to serve next."""
    if order == "fifo" or queue[0].bypassed >= max_bypass:
        return 0
    for i, step in enumerate(queue):
        if step.prefix in cache:
            for earlier in queue[:i]:
                earlier.bypassed += 1
            return i
    return 0
