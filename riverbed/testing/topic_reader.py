"""Reading a topic to its end, and the table a changelog describes: what the tests, the
benchmarks and ``make demo`` check a broker's or a pipeline's output with.

:func:`read_to_end` reads every record of a topic's partitions with librdkafka, from the
beginning of each partition to its end: the high watermark, or for ``read_committed`` (the
default, as in librdkafka) the last stable offset, where librdkafka reports the end of
the partition (``enable.partition.eof``). :func:`count_to_end` counts them without keeping
them. A read that does not reach the end in ``timeout_s``, or any other consumer error,
raises :class:`TopicReadError`.

:func:`last_values` folds a changelog into its table: the last value per key, a tombstone
(``None``) removing the key, as a compacted topic keeps it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

__all__ = [
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "TopicReadError",
    "TopicRecord",
    "count_to_end",
    "last_values",
    "read_to_end",
]

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
_BATCH = 10_000  # messages a consume() call may return
_WAIT_S = 0.1  # consume() waits for all _BATCH messages or this long: keep it short

_LIBRDKAFKA = logging.getLogger("riverbed.testing.librdkafka")
"""librdkafka's log of the reader's consumers: with no logging configured, Python prints its
warnings and errors to stderr and drops the rest (INFO lines such as "Purging ...")."""

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TopicReadError(RuntimeError):
    """A topic could not be read to its end: a consumer error, or no end within the timeout."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicRecord:
    """One record as a consumer receives it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None
    timestamp_ms: int


def read_to_end(
    bootstrap: str,
    topic: str,
    *,
    partitions: int | None = None,
    isolation: str = READ_COMMITTED,
    timeout_s: float = 60,
) -> list[TopicRecord]:
    """Every record of ``topic``'s partitions ``0 .. partitions - 1`` (all of its partitions
    if None; none if the topic does not exist then) a consumer with ``isolation`` reads from
    the beginning to the end, in partition order within each partition."""
    records: list[TopicRecord] = []

    def keep(message: Message) -> None:
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        assert topic is not None and partition is not None and offset is not None  # a record
        headers = cast("list[tuple[str, bytes | None]] | None", message.headers())
        records.append(
            TopicRecord(
                topic=topic,
                partition=partition,
                offset=offset,
                key=message.key(),
                value=message.value(),
                headers=headers,
                timestamp_ms=message.timestamp()[1],
            )
        )

    _read(bootstrap, topic, partitions, isolation, timeout_s, keep)
    return records


def count_to_end(
    bootstrap: str,
    topic: str,
    *,
    partitions: int | None = None,
    isolation: str = READ_COMMITTED,
    timeout_s: float = 60,
) -> int:
    """How many records :func:`read_to_end` would return (without keeping them)."""
    seen = 0

    def count(_: Message) -> None:
        nonlocal seen
        seen += 1

    _read(bootstrap, topic, partitions, isolation, timeout_s, count)
    return seen


def last_values(changes: Iterable[tuple[K, V | None]]) -> dict[K, V]:
    """The table a changelog of ``(key, value)`` describes: the last value of every key, a
    tombstone (``None``) removing it."""
    table: dict[K, V] = {}
    for key, value in changes:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    return table


def _read(
    bootstrap: str,
    topic: str,
    partitions: int | None,
    isolation: str,
    timeout_s: float,
    each: Callable[[Message], Any],
) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "logger": _LIBRDKAFKA,
            "group.id": "riverbed-testing-reader",  # assign() only: no membership, no commits
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            # A Fetch left waiting when the consumer closes keeps the broker's connection
            # open that long; and librdkafka pauses fetching for 1 s whenever its local queue
            # is full, which a Python loop fills quickly (BENCHMARKS.md).
            "fetch.wait.max.ms": 50,
            "fetch.queue.backoff.ms": 10,
        }
    )
    try:
        if partitions is None:
            metadata = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
            if metadata is None or metadata.error is not None:
                return
            partitions = len(metadata.partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        at_end: set[int] = set()
        seen = 0
        deadline = time.monotonic() + timeout_s
        while len(at_end) < partitions:
            if time.monotonic() > deadline:
                raise TopicReadError(
                    f"{topic}: no end of partitions {sorted(set(range(partitions)) - at_end)} "
                    f"within {timeout_s} s ({seen} records read)"
                )
            for message in consumer.consume(num_messages=_BATCH, timeout=_WAIT_S):
                error, partition = message.error(), message.partition()
                if error is None:
                    at_end.discard(partition or 0)  # more came after the end we saw
                    seen += 1
                    each(message)
                elif error.code() == KafkaError._PARTITION_EOF and partition is not None:
                    at_end.add(partition)
                else:
                    raise TopicReadError(f"{topic}: {error}")
    finally:
        consumer.close()
