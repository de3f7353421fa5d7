"""Reading a topic to its end, and the table a changelog describes: what the tests, the
benchmarks and ``make demo`` check a broker's or a pipeline's output with.

:func:`read_to_end` keeps every record of a topic's partitions, from the beginning of each
partition to its end, as :func:`riverbed.client.reading.read_to_end` reads them (the high
watermark, or for ``read_committed`` the last stable offset); :func:`count_to_end` counts
them without keeping them. A read that does not reach the end in ``timeout_s``, or any
other consumer error, raises :class:`TopicReadError`.

:func:`last_values` folds a changelog into its table: the last value per key, a tombstone
(``None``) removing the key, as a compacted topic keeps it; :func:`repeated_keys` finds the
records that repeat the value their key already had, what a record written twice leaves in
a changelog whose values may change (early results and their corrections).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import TypeVar, cast

from confluent_kafka import Message

from riverbed.client.reading import READ_COMMITTED, READ_UNCOMMITTED, TopicReadError
from riverbed.client.reading import read_to_end as _read

__all__ = [
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "TopicReadError",
    "TopicRecord",
    "count_to_end",
    "last_values",
    "read_to_end",
    "repeated_keys",
]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


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

    _read(bootstrap, topic, keep, partitions=_first(partitions), isolation=isolation,
          timeout_s=timeout_s)  # fmt: skip
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

    _read(bootstrap, topic, count, partitions=_first(partitions), isolation=isolation,
          timeout_s=timeout_s)  # fmt: skip
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


def repeated_keys(changes: Iterable[tuple[K, V | None]]) -> list[K]:
    """The key of each change of ``(key, value)`` that repeats the value its key already had
    (a tombstone of a key without one included), in order."""
    table: dict[K, V | None] = {}
    repeated = []
    for key, value in changes:
        if table.get(key) == value:
            repeated.append(key)
        table[key] = value
    return repeated


def _first(partitions: int | None) -> range | None:
    return None if partitions is None else range(partitions)
