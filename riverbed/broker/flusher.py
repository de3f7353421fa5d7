"""Group commit: one fsync round serves every ``acks=all`` request that arrived before it.

A produce request with ``acks=all`` appends its batches (to the page cache) and then awaits
:meth:`GroupFlusher.flushed`. The flusher runs at most one round at a time, in a worker
thread so the event loop keeps serving: a round fsyncs every log made dirty since the last
round and then releases all waiters registered before it started. Requests arriving during a
round wait for the next one, which starts as soon as the current one ends. Under load many
requests share one fsync, so throughput does not fall with the disk's fsync latency; alone,
a request waits for exactly one fsync.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from riverbed.log import Log

__all__ = ["GroupFlusher"]


class GroupFlusher:
    """Groups fsyncs of partition logs across concurrent requests. Event-loop side only."""

    def __init__(self) -> None:
        self._dirty: set[Log] = set()
        self._waiters: list[asyncio.Future[None]] = []
        self._running: asyncio.Task[None] | None = None

    async def flushed(self, logs: Iterable[Log]) -> None:
        """Return once everything appended to ``logs`` so far is on stable storage.

        Raises ``OSError`` if the fsync failed (the broker answers KAFKA_STORAGE_ERROR).
        """
        self._dirty.update(logs)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        if self._running is None:
            self._running = asyncio.create_task(self._run())
        await waiter

    async def _run(self) -> None:
        try:
            while self._waiters:
                logs, self._dirty = self._dirty, set()
                waiters, self._waiters = self._waiters, []
                try:
                    await asyncio.to_thread(_flush_all, logs)
                except OSError as e:
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


def _flush_all(logs: Iterable[Log]) -> None:
    for log in logs:
        log.flush()
