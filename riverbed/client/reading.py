"""Reading a topic's partitions to their end with confluent-kafka: the one loop the
event-sourcing processors and readers, the tests, the benchmarks and ``make demo`` share.

:meth:`TopicReader.read` assigns the partitions (no group membership, no commits),
starting each at the given offset or at its beginning, and hands every record to ``each``
until every partition has reached its end: the high watermark, or for ``read_committed``
(librdkafka's default) the last stable offset, where librdkafka reports the end of the
partition (``enable.partition.eof``). A read that does not reach the end in ``timeout_s``, or any
other consumer error, raises :class:`TopicReadError`. A :class:`TopicReader` makes several
reads with one consumer; :func:`read_to_end` is one read with a consumer of its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from riverbed.client.errors import ClientError

__all__ = [
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "TopicReadError",
    "TopicReader",
    "read_to_end",
    "ready",
]

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
_BATCH = 10_000  # messages a consume() call may return
_WAIT_S = 0.1  # how long a read waits for the next message when it holds none

_LIBRDKAFKA = logging.getLogger("riverbed.client.librdkafka")
"""librdkafka's log of the readers' consumers: with no logging configured, Python prints its
warnings and errors to stderr and drops the rest (INFO lines such as "Purging ...")."""


class TopicReadError(ClientError, RuntimeError):
    """A topic could not be read to its end: a consumer error, or no end within the timeout."""


def ready(consumer: Consumer, most: int, wait_s: float) -> list[Message]:
    """Up to ``most`` messages the consumer holds already or, if it holds none, the next one
    within ``wait_s``. ``consume(most, wait_s)`` waits the whole ``wait_s`` unless ``most``
    messages come, even with a partition's end or the only command in hand: a read of a
    small partition took 0.1 s, a command at 1,000/s waited 0.2 s for its processor."""
    messages = consumer.consume(num_messages=most, timeout=0)
    if messages:
        return messages
    message = consumer.poll(wait_s)
    return [] if message is None else [message]


class TopicReader:
    """One consumer for several reads to the end: each :meth:`read` assigns the partitions
    it reads anew. A consumer costs some 50 ms to start (its connection and first metadata
    request); a read of a small partition on one already started, 6 ms. Use it as a context
    manager, or :meth:`close` it."""

    def __init__(
        self,
        bootstrap: str,
        *,
        isolation: str = READ_COMMITTED,
        timeout_s: float = 60,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "logger": _LIBRDKAFKA,
                "group.id": "riverbed-reader",  # assign() only: no membership, no commits
                **(settings or {}),
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": isolation,
                # The end of a partition is known when a Fetch at it comes back empty, after
                # fetch.wait.max.ms: 5 ms, not librdkafka's 500, makes a read of a small
                # partition take 6 ms instead of 100 (at 50). A Fetch left waiting when the
                # consumer closes also keeps the broker's connection open that long.
                # librdkafka pauses fetching for 1 s whenever its local queue is full, which
                # a Python loop fills quickly (BENCHMARKS.md).
                "fetch.wait.max.ms": 5,
                "fetch.queue.backoff.ms": 10,
            }
        )

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._consumer.close()

    def partition_counts(self, topic: str | None = None) -> dict[str, int]:
        """The partition count of ``topic`` (of every topic if None), for the topics there
        are: a consumer's metadata request, which creates no topic."""
        try:
            found = self._consumer.list_topics(topic, timeout=self.timeout_s).topics
        except KafkaException as e:
            raise TopicReadError(f"no broker at {self.bootstrap}: {e.args[0].str()}") from None
        return {
            name: len(meta.partitions)
            for name, meta in found.items()
            if meta.error is None and meta.partitions
        }

    def read(
        self,
        topic: str,
        each: Callable[[Message], Any],
        *,
        partitions: Iterable[int] | None = None,
        start: Mapping[int, int] | None = None,
    ) -> None:
        """Call ``each`` with every record of ``topic``'s ``partitions`` (all of them if
        None; none if the topic does not exist), in offset order within each partition, from
        ``start[partition]`` (the beginning where not given) to the end."""
        count = self._partition_count(topic)
        if count is not None:
            wanted = range(count) if partitions is None else partitions
            self._read(topic, count, {p: each for p in wanted}, start)

    def read_partitions(
        self,
        topic: str,
        each: Mapping[int, Callable[[Message], Any]],
        *,
        start: Mapping[int, int] | None = None,
    ) -> None:
        """:meth:`read` with a function per partition, the keys of ``each``: a replay calls
        its partition's own at once (a call more per record is 2% of a replay)."""
        count = self._partition_count(topic)
        if count is not None:
            self._read(topic, count, each, start)

    def _partition_count(self, topic: str) -> int | None:
        # The topic's metadata first: it says whether there is such a topic, and without it
        # librdkafka's first offset query for OFFSET_BEGINNING fails and is retried 500 ms
        # later (measured: 0.6 s against 0.1 s to read a one-record partition).
        return self.partition_counts(topic).get(topic)

    def _read(
        self,
        topic: str,
        count: int,
        each: Mapping[int, Callable[[Message], Any]],
        start: Mapping[int, int] | None,
    ) -> None:
        missing = set(each) - set(range(count))
        if missing:
            raise TopicReadError(f"{topic} has no partition {sorted(missing)}")
        starts = start or {}
        consumer = self._consumer
        consumer.assign(
            [TopicPartition(topic, p, starts.get(p, OFFSET_BEGINNING)) for p in sorted(each)]
        )
        try:
            self._to_end(topic, each)
        finally:
            consumer.unassign()

    def _to_end(self, topic: str, each: Mapping[int, Callable[[Message], Any]]) -> None:
        at_end: set[int] = set()
        seen = 0
        deadline = time.monotonic() + self.timeout_s
        while len(at_end) < len(each):
            if time.monotonic() > deadline:
                raise TopicReadError(
                    f"{topic}: no end of partitions {sorted(set(each) - at_end)} "
                    f"within {self.timeout_s} s ({seen} records read)"
                )
            for message in ready(self._consumer, _BATCH, _WAIT_S):
                error = message.error()
                # None only for an error of the whole consumer (ignored here, as before)
                partition: int = message.partition()  # type: ignore[assignment]
                handle = each.get(partition)
                if handle is None or message.topic() != topic:
                    continue  # left from an earlier read
                if error is None:
                    at_end.discard(partition)  # more came after the end we saw
                    seen += 1
                    handle(message)
                elif error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(partition)
                else:
                    raise TopicReadError(f"{topic}: {error.str()}")


def read_to_end(
    bootstrap: str,
    topic: str,
    each: Callable[[Message], Any],
    *,
    partitions: Iterable[int] | None = None,
    start: Mapping[int, int] | None = None,
    isolation: str = READ_COMMITTED,
    timeout_s: float = 60,
    settings: Mapping[str, Any] | None = None,
) -> None:
    """One :meth:`TopicReader.read` with a reader of its own. ``settings`` are more
    librdkafka settings (security, ...)."""
    with TopicReader(
        bootstrap, isolation=isolation, timeout_s=timeout_s, settings=settings
    ) as reader:
        reader.read(topic, each, partitions=partitions, start=start)
