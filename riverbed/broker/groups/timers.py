"""Keyed one-shot timers for the coordinator: session, rebalance and join-delay expiry.

The coordinator never sleeps or polls: each deadline is one timer, (re)set when the
deadline moves (a heartbeat) and cancelled when it no longer matters. Two implementations:

- :class:`LoopTimers` puts each timer on the running asyncio loop (``loop.call_later``), the
  delay computed from the broker's clock, so expiry is as precise as the loop (~1 ms);
- :class:`ManualTimers` fires timers only when a test calls :meth:`ManualTimers.advance`,
  with a fake clock it owns — the state machine is then tested without sockets or sleeps.

Keys are any hashable value; setting a key that is already set replaces its timer.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable, Hashable
from typing import Protocol

__all__ = ["LoopTimers", "ManualTimers", "Timers"]


class Timers(Protocol):
    """What the coordinator needs from a timer service."""

    def now_ms(self) -> int:
        """The clock the deadlines are in (epoch milliseconds)."""
        ...

    def set(self, key: Hashable, deadline_ms: int, callback: Callable[[], None]) -> None:
        """Run ``callback`` once at ``deadline_ms`` unless the key is set again or cancelled."""
        ...

    def cancel(self, key: Hashable) -> None:
        """Forget the timer of ``key`` (no error if there is none)."""
        ...

    def cancel_all(self) -> None: ...


class LoopTimers:
    """Timers on the running asyncio loop, deadlines in the broker clock's milliseconds."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self._clock = clock
        self._handles: dict[Hashable, asyncio.TimerHandle] = {}

    def now_ms(self) -> int:
        return self._clock()

    def set(self, key: Hashable, deadline_ms: int, callback: Callable[[], None]) -> None:
        self.cancel(key)
        delay_s = max(0.0, (deadline_ms - self._clock()) / 1000)

        def fire() -> None:
            self._handles.pop(key, None)
            callback()

        self._handles[key] = asyncio.get_running_loop().call_later(delay_s, fire)

    def cancel(self, key: Hashable) -> None:
        handle = self._handles.pop(key, None)
        if handle is not None:
            handle.cancel()

    def cancel_all(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()


class ManualTimers:
    """A fake clock and timers that fire only in :meth:`advance` (for unit tests)."""

    def __init__(self, *, start_ms: int = 1_767_225_600_000) -> None:
        self.time_ms = start_ms
        self._queue: list[tuple[int, int, Hashable]] = []
        self._live: dict[Hashable, tuple[int, Callable[[], None]]] = {}
        self._sequence = itertools.count()

    def now_ms(self) -> int:
        return self.time_ms

    def set(self, key: Hashable, deadline_ms: int, callback: Callable[[], None]) -> None:
        token = next(self._sequence)
        self._live[key] = (token, callback)
        heapq.heappush(self._queue, (deadline_ms, token, key))

    def cancel(self, key: Hashable) -> None:
        self._live.pop(key, None)

    def cancel_all(self) -> None:
        self._live.clear()
        self._queue.clear()

    def pending(self, key: Hashable) -> bool:
        return key in self._live

    def advance(self, ms: int) -> None:
        """Move the clock forward, firing every due timer in deadline order."""
        target = self.time_ms + ms
        while self._queue and self._queue[0][0] <= target:
            deadline, token, key = heapq.heappop(self._queue)
            live = self._live.get(key)
            if live is None or live[0] != token:
                continue  # replaced or cancelled
            del self._live[key]
            self.time_ms = max(self.time_ms, deadline)
            live[1]()
        self.time_ms = target
