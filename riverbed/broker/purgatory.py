"""Where long-polling fetches wait for data (Kafka calls it the fetch purgatory).

A Fetch that found fewer than ``min_bytes`` registers one waiter on every partition it asked
for and sleeps until an append to any of them, or until its ``max_wait_ms`` runs out. An
append wakes every waiter of its partition; each woken fetch reads again and decides whether
it now has enough. Waiters never hold data, so a thousand idle consumers cost a thousand
futures and nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Iterable

__all__ = ["FetchPurgatory"]

TopicPartition = tuple[str, int]


class FetchPurgatory:
    """Event-loop side only."""

    def __init__(self) -> None:
        self._waiters: defaultdict[TopicPartition, set[asyncio.Future[None]]] = defaultdict(set)

    def notify(self, topic_partition: TopicPartition) -> None:
        """Data was appended to this partition: wake its waiters."""
        waiters = self._waiters.pop(topic_partition, None)
        if waiters:
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def notify_all(self) -> None:
        """Wake every waiter (topic deleted, broker stopping)."""
        for topic_partition in list(self._waiters):
            self.notify(topic_partition)

    async def wait(self, partitions: Iterable[TopicPartition], *, timeout_s: float) -> None:
        """Sleep until one of ``partitions`` is appended to, or ``timeout_s`` passes."""
        if timeout_s <= 0:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(partitions)
        for key in keys:
            self._waiters[key].add(waiter)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter, timeout_s)
        finally:
            for key in keys:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._waiters[key]
