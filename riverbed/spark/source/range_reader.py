"""Reading one offset range of one partition into Arrow record batches (on an executor).

:func:`read_range` reads exactly the records of ``[start, end)`` that the query's isolation
level shows, so a re-read after a failure returns the same rows: the end was planned from
ListOffsets "latest", which under read_committed is the last stable offset, and nothing below
it changes any more. Offsets inside the range may be missing (compaction, transaction
markers, aborted records); the read stops at the first record at or past ``end``, or at the
end of the partition once the position reached ``end``.

librdkafka's ``consume(n, timeout)`` waits for a full batch of ``n`` until the timeout, so
``n`` is never more than the records left in the range (a range that holds them all returns
as soon as they are read: a micro-batch of 75 records a partition waited 50 ms a task for
records past its end before), and the timeout is short (:data:`CONSUME_TIMEOUT_S`) for a range
with offsets missing; the consumer's prefetch queue keeps batches full while records are
there.

Records gone before they were read (retention, DeleteRecords: the partition's log start
offset passed ``start``) are reported with ``failOnDataLoss``: a
:class:`~riverbed.spark.errors.DataLossError` naming topic, partition and the lost offsets,
or a warning and the read goes on from the earliest offset left.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from riverbed.spark.errors import DataLossError, SourceError
from riverbed.spark.source.kafka_client import LIBRDKAFKA_LOG
from riverbed.spark.source.offsets import OffsetRange
from riverbed.spark.source.schema import arrow_schema

__all__ = ["BATCH_ROWS", "ReadConfig", "read_range"]

log = logging.getLogger(__name__)

BATCH_ROWS = 10_000
"""Rows per record batch, as Spark's ``spark.sql.execution.arrow.maxRecordsPerBatch``:
10,000, 20,000 and 50,000 read equally fast (0.6-0.7M rows/s a task, measured), and smaller
batches keep a task's memory small."""
CONSUME_MESSAGES = 2_000
"""Per ``consume`` call: 2,000 read 1.1M msg/s from a local broker, 5,000 0.6-0.8M, 10,000
0.7-0.8M (measured on 2 cores; the broker's consume benchmark found the same)."""
CONSUME_TIMEOUT_S = 0.05
"""``consume`` returns after this long even with fewer than CONSUME_MESSAGES records."""
WATERMARK_TIMEOUT_S = 30.0

GONE = frozenset(
    {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC}
)
"""Errors saying the topic or partition was deleted."""

TIMESTAMP_TYPE_OFFSET = 1
"""confluent-kafka's timestamp types are Kafka's plus one (0 none, 1 create, 2 log append)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadConfig:
    """What an executor needs besides the range: pickled with every input partition."""

    consumer_config: dict[str, str]
    include_headers: bool
    fail_on_data_loss: bool
    poll_timeout_ms: int


class _Columns:
    """Records of one partition collected column by column, turned into a RecordBatch."""

    def __init__(self, topic: str, partition: int, *, include_headers: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.schema = arrow_schema(include_headers=include_headers)
        self.clear()

    def clear(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps_us: list[int] = []
        self.timestamp_types: list[int] = []
        self.headers: list[list[tuple[str, bytes | None]] | None] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def extend(self, messages: list[Message]) -> None:
        """Add records (no error events): a column at a time, which is about twice as fast
        in CPython as a loop over the records."""
        self.keys += [m.key() for m in messages]
        self.values += [m.value() for m in messages]
        self.offsets += [m.offset() for m in messages]  # type: ignore[misc]
        # Two passes, not a list of (type, ms) tuples: keeping thousands of tuples alive
        # sets off the cyclic garbage collector (measured: 10x the cost of the calls).
        self.timestamps_us += [m.timestamp()[1] * 1000 for m in messages]
        self.timestamp_types += [m.timestamp()[0] - TIMESTAMP_TYPE_OFFSET for m in messages]
        if self.include_headers:
            # Spark's converter: null, not an empty array, for a record without headers.
            self.headers += [m.headers() or None for m in messages]  # type: ignore[misc]

    def flush(self) -> pa.RecordBatch:
        count = len(self.offsets)
        arrays: list[Any] = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.repeat(pa.scalar(self.topic, pa.string()), count),
            pa.repeat(pa.scalar(self.partition, pa.int32()), count),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.timestamps_us, pa.timestamp("us", tz="UTC")),
            pa.array(self.timestamp_types, pa.int32()),
        ]
        if self.include_headers:
            arrays.append(pa.array(self.headers, self.schema.field("headers").type))
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        self.clear()
        return batch


def _report_loss(config: ReadConfig, message: str) -> None:
    if config.fail_on_data_loss:
        raise DataLossError(message)
    log.warning("%s Skipped (failOnDataLoss=false).", message)


def _out_of_range(
    consumer: Consumer, offset_range: OffsetRange, position: int, config: ReadConfig
) -> int:
    """Where to go on after the broker refused ``position``: the earliest offset left, or
    ``end`` when nothing of the range is left (after reporting the loss)."""
    topic, partition, end = offset_range.topic, offset_range.partition, offset_range.end
    low, high = consumer.get_watermark_offsets(
        TopicPartition(topic, partition), timeout=WATERMARK_TIMEOUT_S
    )
    name = f"topic {topic!r} partition {partition}"
    if position < low:
        lost_end = min(low, end)
        _report_loss(
            config,
            f"Offsets [{position}, {lost_end}) of {name} are gone: the earliest offset is now"
            f" {low}.",
        )
        return lost_end
    _report_loss(
        config,
        f"Offsets [{position}, {end}) of {name} are gone: the partition now ends at {high}"
        " (was the topic deleted and created again?).",
    )
    return end


def _one_by_one(
    consumer: Consumer,
    messages: list[Message],
    columns: _Columns,
    offset_range: OffsetRange,
    position: int,
    config: ReadConfig,
) -> int:
    """The records and events of one ``consume`` call that reaches the end of the range or
    holds an event; returns the new position (``end`` once the range is done)."""
    topic, partition, end = offset_range.topic, offset_range.partition, offset_range.end
    for message in messages:
        error = message.error()
        if error is None:
            offset: int = message.offset()  # type: ignore[assignment]
            if offset >= end:
                return end
            columns.extend([message])
            position = offset + 1
            continue
        code = error.code()
        if code == KafkaError._PARTITION_EOF:
            eof: int = message.offset()  # type: ignore[assignment]
            if eof < end:
                _report_loss(
                    config,
                    f"Offsets [{max(eof, position)}, {end}) of topic {topic!r} partition"
                    f" {partition} are gone: the partition ends at {eof}.",
                )
            return end
        if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            position = _out_of_range(consumer, offset_range, position, config)
            if position < end:
                consumer.assign([TopicPartition(topic, partition, position)])
            return position
        if code in GONE:
            _report_loss(
                config,
                f"Offsets [{position}, {end}) of topic {topic!r} partition {partition} are"
                f" gone: the partition does not exist any more ({error.str()}).",
            )
            return end
        if error.fatal():
            raise SourceError(
                f"reading topic {topic!r} partition {partition} at offset {position}: {error.str()}"
            )
        log.info("retrying %s-%d at %d after %s", topic, partition, position, error.str())
    return position


def read_range(offset_range: OffsetRange, config: ReadConfig) -> Iterator[pa.RecordBatch]:
    """The records of ``offset_range`` in batches of about :data:`BATCH_ROWS` rows."""
    topic, partition, end = offset_range.topic, offset_range.partition, offset_range.end
    position = offset_range.start
    if position >= end:
        return
    columns = _Columns(topic, partition, include_headers=config.include_headers)
    consumer = Consumer({**config.consumer_config, "logger": LIBRDKAFKA_LOG})
    try:
        consumer.assign([TopicPartition(topic, partition, position)])
        waited_since = time.monotonic()
        while position < end:
            messages = consumer.consume(min(CONSUME_MESSAGES, end - position), CONSUME_TIMEOUT_S)
            if not messages:
                if (time.monotonic() - waited_since) * 1000 > config.poll_timeout_ms:
                    raise SourceError(
                        f"no record of topic {topic!r} partition {partition} at offset"
                        f" {position} within kafkaConsumer.pollTimeoutMs"
                        f" ({config.poll_timeout_ms} ms); the range ends at {end}"
                    )
                continue
            waited_since = time.monotonic()
            last: int = messages[-1].offset()  # type: ignore[assignment]
            if last < end and all(m.error() is None for m in messages):
                columns.extend(messages)  # the usual case: records only, all in the range
                position = last + 1
            else:
                position = _one_by_one(consumer, messages, columns, offset_range, position, config)
            if len(columns) >= BATCH_ROWS:
                yield columns.flush()
        if len(columns):
            yield columns.flush()
    except KafkaException as e:
        raise SourceError(f"reading topic {topic!r} partition {partition}: {e}") from None
    finally:
        consumer.close()
