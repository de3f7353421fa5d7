"""Reading a topic's partitions to their end with confluent-kafka: the one loop the
event-sourcing processors and readers, the tests, the benchmarks and ``make demo`` share.

:func:`read_to_end` assigns the partitions (no group membership, no commits), starting each
at the given offset or at its beginning, and hands every record to ``each`` until every
partition has reached its end: the high watermark, or for ``read_committed`` (librdkafka's
default) the last stable offset, where librdkafka reports the end of the partition
(``enable.partition.eof``). A read that does not reach the end in ``timeout_s``, or any
other consumer error, raises :class:`TopicReadError`.
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

__all__ = ["READ_COMMITTED", "READ_UNCOMMITTED", "TopicReadError", "read_to_end"]

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
_BATCH = 10_000  # messages a consume() call may return
_WAIT_S = 0.1  # consume() waits for all _BATCH messages or this long: keep it short

_LIBRDKAFKA = logging.getLogger("riverbed.client.librdkafka")
"""librdkafka's log of the readers' consumers: with no logging configured, Python prints its
warnings and errors to stderr and drops the rest (INFO lines such as "Purging ...")."""


class TopicReadError(ClientError, RuntimeError):
    """A topic could not be read to its end: a consumer error, or no end within the timeout."""


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
    """Call ``each`` with every record of ``topic``'s ``partitions`` (all of them if None;
    none if the topic does not exist), in offset order within each partition, from
    ``start[partition]`` (the beginning where not given) to the end. ``settings`` are more
    librdkafka settings (security, ...)."""
    consumer = Consumer(
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
            # consumer closes also keeps the broker's connection open that long. librdkafka
            # pauses fetching for 1 s whenever its local queue is full, which a Python loop
            # fills quickly (BENCHMARKS.md).
            "fetch.wait.max.ms": 5,
            "fetch.queue.backoff.ms": 10,
        }
    )
    try:
        # The topic's metadata first: it says whether there is such a topic, and without it
        # librdkafka's first offset query for OFFSET_BEGINNING fails and is retried 500 ms
        # later (measured: 0.6 s against 0.1 s to read a one-record partition).
        try:
            metadata = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        except KafkaException as e:
            raise TopicReadError(f"no broker at {bootstrap}: {e.args[0].str()}") from None
        if metadata is None or metadata.error is not None:
            return
        if partitions is None:
            partitions = range(len(metadata.partitions))
        missing = set(partitions) - set(metadata.partitions)
        if missing:
            raise TopicReadError(f"{topic} has no partition {sorted(missing)}")
        wanted = sorted(set(partitions))
        starts = start or {}
        consumer.assign([TopicPartition(topic, p, starts.get(p, OFFSET_BEGINNING)) for p in wanted])
        at_end: set[int] = set()
        seen = 0
        deadline = time.monotonic() + timeout_s
        while len(at_end) < len(wanted):
            if time.monotonic() > deadline:
                raise TopicReadError(
                    f"{topic}: no end of partitions {sorted(set(wanted) - at_end)} "
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
                    raise TopicReadError(f"{topic}: {error.str()}")
    finally:
        consumer.close()
