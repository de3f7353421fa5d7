"""Helpers of the reader tests: producing test records and running short streaming queries."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

Record = tuple[int, bytes | None, bytes, int]
"""(partition, key, value, timestamp_ms)."""

BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[Record],
    *,
    headers: list[tuple[str, bytes | None]] | None = None,
) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, key, value, timestamp_ms in records:
        producer.produce(
            topic,
            value=value,
            key=key,
            partition=partition,
            timestamp=timestamp_ms,
            headers=headers,
        )
    assert producer.flush(30) == 0


def produce_values(bootstrap: str, topic: str, partition: int, values: Iterable[str]) -> None:
    produce(bootstrap, topic, [(partition, None, v.encode(), BASE_MS) for v in values])


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """read_committed end offsets (last stable offsets)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.list_offsets(
        {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)},
        isolation_level=IsolationLevel.READ_COMMITTED,
    )
    return {tp.partition: f.result().offset for tp, f in futures.items()}


def stream(spark: SparkSession, bootstrap: str, **options: str) -> DataFrame:
    reader = spark.readStream.format("riverbed").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def wait_for(condition: Callable[[], bool], *, timeout_s: float = 60, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or condition}")
        time.sleep(0.1)


def input_rows(query: StreamingQuery) -> list[int]:
    """numInputRows of every micro-batch that read something, in order."""
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]
