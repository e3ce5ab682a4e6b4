"""Clocks for the two time modes of the runtime.

`wall`: the ordinary asyncio loop; a sim step really sleeps its modelled latency.
`virtual`: an asyncio loop whose clock jumps to the next timer instead of waiting, so the same
engine code, timeouts and budgets run instantly and give the same makespans.

For bulk simulation (RL rollouts, policy comparisons) with executors that can `simulate()` and
policies that never wait, `DiscreteEventClock` runs the same scheduler as a plain discrete-event
simulation, without an event loop at all; the tests check it agrees with the asyncio loop.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import selectors
from collections.abc import Callable, Coroutine
from typing import Any, Literal, Protocol, TypeVar

T = TypeVar("T")

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


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """What the engine needs of time: an asyncio loop is one."""

    def time(self) -> float: ...

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> Cancellable: ...


def _nothing(*args: Any) -> None:
    return None


class _Event:
    __slots__ = ("callback", "args", "cancelled")

    def __init__(self, callback: Callable[..., object], args: tuple[Any, ...]):
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        # Like asyncio's handles, drop the references so nothing is kept alive by the heap.
        self.cancelled = True
        self.callback = _nothing
        self.args = ()


class DiscreteEventClock:
    """Virtual time advanced by a heap of timed callbacks; ties run in scheduling order."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, _Event]] = []
        self._order = itertools.count()

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[..., object], *args: Any) -> _Event:
        event = _Event(callback, args)
        heapq.heappush(self._heap, (when, next(self._order), event))
        return event

    def run_until(self, finished: Callable[[], bool]) -> None:
        heap = self._heap
        while not finished():
            if not heap:
                raise RuntimeError("simulation stalled: nothing is scheduled and it is not done")
            when, _, event = heapq.heappop(heap)
            if event.cancelled:
                continue
            if when > self.now:
                self.now = when
            event.callback(*event.args)


def run_synchronously(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never waits on anything (a discrete-event episode) to its end."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise RuntimeError(
        "the coroutine waited on an event loop; run it on an asyncio loop instead "
        "(the policy or an executor is not synchronous)"
    )
