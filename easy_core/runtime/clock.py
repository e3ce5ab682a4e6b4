"""Event loops for the two time modes of the runtime.

`wall`: the ordinary asyncio loop; a sim step really sleeps its modelled latency.
`virtual`: an asyncio loop whose clock jumps to the next timer instead of waiting, so the same
engine code, timeouts and budgets run instantly and give the same makespans.
"""

from __future__ import annotations

import asyncio
import selectors
from typing import Literal

TimeMode = Literal["virtual", "wall"]


class _VirtualSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    def __init__(self, loop: VirtualTimeLoop):
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None):  # type: ignore[override]
        if timeout is None:
            # Nothing scheduled: only another thread can wake us, so wait for real.
            return super().select(None)
        # Steps do no real I/O in virtual time; skipping the poll keeps the loop cheap.
        if timeout > 0:
            self._loop.advance(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """`loop.time()` is virtual; waiting for a timer advances it instead of sleeping."""

    def __init__(self) -> None:
        self._virtual_now = 0.0
        super().__init__(selector=_VirtualSelector(self))

    def time(self) -> float:
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        self._virtual_now += seconds


def new_event_loop(mode: TimeMode) -> asyncio.AbstractEventLoop:
    if mode == "virtual":
        return VirtualTimeLoop()
    if mode == "wall":
        return asyncio.new_event_loop()
    raise ValueError(f"unknown time mode {mode!r}; use 'virtual' or 'wall'")
