"""Arrow record batches to ``Producer.produce`` calls: the sink's inner loop.

Columns are turned into Python lists a batch at a time (``to_pylist`` runs in C), and the
common shape (value, key, topic and nothing else) takes a loop with no keyword arguments:
on ``local[2]`` that loop is most of a task's time. ``BufferError`` (librdkafka's queue
is full: ``queue.buffering.max.messages``, 100,000 by default) is answered by serving
delivery reports until there is room.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Producer

from riverbed.spark.errors import SinkDataError
from riverbed.spark.sink.config import SinkPlan

__all__ = ["produce_batches", "row_topic"]

QUEUE_FULL_POLL_S = 0.05
"""How long to serve delivery reports when librdkafka's queue is full before trying again."""

NULL_TOPIC = "null topic present in the data. Use the topic option for setting a default topic."
"""Spark's message (KafkaRowWriter)."""


def _topics(plan: SinkPlan, batch: pa.RecordBatch) -> list[Any]:
    if plan.topic is not None:
        return [plan.topic] * batch.num_rows
    column = batch.column("topic")
    if column.null_count:
        raise SinkDataError(NULL_TOPIC)
    topics: list[Any] = column.to_pylist()
    return topics


def row_topic(plan: SinkPlan, batch: pa.RecordBatch, row: int) -> str:
    """The topic row ``row`` of ``batch`` is written to."""
    if plan.topic is not None:
        return plan.topic
    topic = batch.column("topic")[row].as_py()
    if topic is None:
        raise SinkDataError(NULL_TOPIC)
    return str(topic)


def _timestamps_ms(plan: SinkPlan, batch: pa.RecordBatch) -> list[Any]:
    """Epoch milliseconds (0, "now" for librdkafka, where null): Spark casts to a timestamp
    (microseconds) and strips the micros."""
    column = batch.column("timestamp")
    if plan.columns.timestamp_is_seconds:
        micros = pc.cast(pc.multiply(column, 1_000_000.0), pa.int64(), safe=False)
    else:
        micros = column.cast(pa.int64())
    millis = pc.divide(micros, 1000)  # integer division, truncating as Java's
    return [0 if ms is None else ms for ms in millis.to_pylist()]


def _headers(batch: pa.RecordBatch) -> list[Any]:
    return [
        None if row is None else [(header["key"], header["value"]) for header in row]
        for row in batch.column("headers").to_pylist()
    ]


def _produce(producer: Producer, *args: Any, **kwargs: Any) -> None:
    while True:
        try:
            producer.produce(*args, **kwargs)
            return
        except BufferError:
            producer.poll(QUEUE_FULL_POLL_S)


def produce_batches(producer: Producer, plan: SinkPlan, batches: Iterable[pa.RecordBatch]) -> int:
    """Produce every row of ``batches`` (asynchronously); the number of rows."""
    columns = plan.columns
    simple = not (columns.partition or columns.headers or columns.timestamp)
    produce = producer.produce
    rows = 0
    for batch in batches:
        count = batch.num_rows
        if not count:
            continue
        topics = _topics(plan, batch)
        values = batch.column("value").to_pylist()
        keys = batch.column("key").to_pylist() if columns.key else [None] * count
        if simple:
            for topic, value, key in zip(topics, values, keys, strict=True):
                try:
                    produce(topic, value, key)
                except BufferError:
                    _produce(producer, topic, value, key)
        else:
            partitions = batch.column("partition").to_pylist() if columns.partition else None
            headers = _headers(batch) if columns.headers else None
            timestamps = _timestamps_ms(plan, batch) if columns.timestamp else None
            for row in range(count):
                partition = partitions[row] if partitions is not None else None
                _produce(
                    producer,
                    topics[row],
                    values[row],
                    keys[row],
                    partition=-1 if partition is None else partition,
                    headers=headers[row] if headers is not None else None,
                    timestamp=timestamps[row] if timestamps is not None else 0,
                )
        rows += count
    return rows
