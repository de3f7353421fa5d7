"""Group commit: one fsync round serves every ``acks=all`` request that arrived before it.

A produce request with ``acks=all`` appends its batches (to the page cache) and then awaits
:meth:`GroupFlusher.flushed`. The flusher runs at most one round at a time, in a worker
thread so the event loop keeps serving: a round fsyncs every log made dirty since the last
round and then releases all waiters registered before it started. Requests arriving during a
round wait for the next one, which starts as soon as the current one ends. Under load many
requests share one fsync, so throughput does not fall with the disk's fsync latency; alone,
a request waits for exactly one fsync.

A transaction's writes do not wait: :meth:`GroupFlusher.soon` has the next round take them
along, and the commit fsyncs whatever is left with :meth:`GroupFlusher.now`, in a thread of
its own rather than behind the round in progress (at 1,000 transactions/s rounds run back to
back, some 2 ms each).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

from riverbed.log import Log

__all__ = ["GroupFlusher"]


class GroupFlusher:
    """Groups fsyncs of partition logs across concurrent requests. Event-loop side only."""

    def __init__(self, *, observe: Callable[[float], None] | None = None) -> None:
        """``observe``: given the seconds of each log's fsync (from a worker thread)."""
        self._observe = observe
        self._dirty: set[Log] = set()
        self._waiters: list[asyncio.Future[None]] = []
        self._running: asyncio.Task[None] | None = None

    async def flushed(self, logs: Iterable[Log]) -> None:
        """Return once everything appended to ``logs`` so far is on stable storage.

        Raises ``OSError`` if the fsync failed (the broker answers KAFKA_STORAGE_ERROR).
        """
        dirty = _unflushed(logs)
        if not dirty:  # a round has fsynced all of it already
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self.soon(dirty)
        await waiter

    async def now(self, logs: Iterable[Log]) -> None:
        """fsync ``logs`` at once, in a thread of its own, instead of after the round in
        progress and with everything it gathered: the fsyncs on a transaction's commit
        path (its data, then its Prepare record), which its client waits for."""
        dirty = _unflushed(logs)
        if dirty:
            await asyncio.to_thread(_flush_all, dirty, self._observe)

    def soon(self, logs: Iterable[Log]) -> None:
        """Have the next round fsync ``logs`` too, without waiting for it: a transaction's
        data, which its commit must find on disk (it waits with :meth:`flushed`, which then
        has nothing left to do, or less)."""
        self._dirty.update(logs)
        if self._running is None:
            self._running = asyncio.create_task(self._run())

    async def _run(self) -> None:
        try:
            while self._waiters or self._dirty:
                logs, self._dirty = self._dirty, set()
                waiters, self._waiters = self._waiters, []
                try:
                    await asyncio.to_thread(_flush_all, logs, self._observe)
                except OSError as e:  # a log it failed stays below its end: flushed() retries
                    for waiter in waiters:
                        if not waiter.done():
                            waiter.set_exception(e)
                else:
                    for waiter in waiters:
                        if not waiter.done():
                            waiter.set_result(None)
        finally:
            self._running = None

    async def close(self) -> None:
        """Wait for a round in progress to end."""
        if self._running is not None:
            await asyncio.shield(self._running)


def _unflushed(logs: Iterable[Log]) -> list[Log]:
    """Those of ``logs`` holding records appended since their last fsync."""
    return [log for log in logs if log.flushed_offset < log.log_end_offset]


def _flush_all(logs: Iterable[Log], observe: Callable[[float], None] | None) -> None:
    for log in logs:
        started = time.perf_counter()
        log.flush()
        if observe is not None:
            observe(time.perf_counter() - started)
