"""The executors' range reader on its own (no Spark): exact ranges, Arrow schema, gaps."""

from __future__ import annotations

from typing import ClassVar

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from riverbed.broker import Broker
from riverbed.spark.errors import DataLossError
from riverbed.spark.source import range_reader
from riverbed.spark.source.kafka_client import consumer_config
from riverbed.spark.source.offsets import OffsetRange
from riverbed.spark.source.range_reader import BATCH_ROWS, CONSUME_MESSAGES, ReadConfig, read_range
from riverbed.spark.source.schema import arrow_schema
from tests.support.brokers import create_topic
from tests.support.spark_reader import end_offsets, wait_for


def config(bootstrap: str, *, include_headers: bool = False, fail: bool = True) -> ReadConfig:
    return ReadConfig(
        consumer_config=consumer_config(
            {"bootstrap.servers": bootstrap, "group.id": "t", "isolation.level": "read_committed"}
        ),
        include_headers=include_headers,
        fail_on_data_loss=fail,
        poll_timeout_ms=10_000,
    )


def read(bootstrap: str, start: int, end: int, **options: bool) -> list[pa.RecordBatch]:
    offset_range = OffsetRange(topic="r", partition=0, start=start, end=end)
    return list(read_range(offset_range, config(bootstrap, **options)))


def offsets(batches: list[pa.RecordBatch]) -> list[int]:
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_exact_ranges_in_arrow_batches_of_the_spark_schema(broker: Broker) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "r", partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    count = 25_000
    for i in range(count):
        headers = [("n", b"%d" % i)] if i % 2 else None
        producer.produce("r", value=b"v%d" % i, key=b"k", partition=0, headers=headers)
    assert producer.flush(30) == 0

    whole = read(bootstrap, 0, count, include_headers=True)
    assert all(b.schema == arrow_schema(include_headers=True) for b in whole)
    assert all(b.num_rows <= BATCH_ROWS + CONSUME_MESSAGES for b in whole)
    assert offsets(whole) == list(range(count))
    table = pa.Table.from_batches(whole)
    assert table.column("value").to_pylist()[:3] == [b"v0", b"v1", b"v2"]
    assert table.column("headers").to_pylist()[:2] == [None, [{"key": "n", "value": b"1"}]]
    assert set(table.column("topic").to_pylist()) == {"r"}
    assert set(table.column("timestampType").to_pylist()) == {0}

    # Ranges that end inside the partition, twice, read the same records.
    for start, end in ((0, 1), (7, 12_345), (24_999, 25_000), (3, 3)):
        first = read(bootstrap, start, end)
        assert offsets(first) == list(range(start, end))
        assert all(b.schema == arrow_schema(include_headers=False) for b in first)
        assert pa.Table.from_batches(first, arrow_schema(include_headers=False)).equals(
            pa.Table.from_batches(read(bootstrap, start, end), arrow_schema(include_headers=False))
        )


class CountingConsumer(Consumer):
    """A consumer that records each ``consume`` call: the messages asked for and got."""

    calls: ClassVar[list[tuple[int, int]]] = []

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        messages = super().consume(num_messages, timeout)
        CountingConsumer.calls.append((num_messages, len(messages)))
        return messages


def test_no_consume_call_waits_for_records_past_the_range(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``consume(n, timeout)`` returns early only with ``n`` messages: asking for more than
    the range holds made every small range wait the whole timeout for records past its end
    (a micro-batch of 75 records a partition waited 50 ms a task)."""
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "r", partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(CONSUME_MESSAGES + 500):
        producer.produce("r", value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    monkeypatch.setattr(range_reader, "Consumer", CountingConsumer)

    for start, end in ((0, 75), (100, 100 + CONSUME_MESSAGES + 10), (2_400, 2_500)):
        CountingConsumer.calls = []
        assert offsets(read(bootstrap, start, end)) == list(range(start, end))
        left = end - start
        for asked, got in CountingConsumer.calls:
            assert asked == min(left, CONSUME_MESSAGES)
            left -= got
        assert left == 0


def test_transaction_markers_and_aborted_records_are_gaps(broker: Broker) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "r", partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "gaps"})
    producer.init_transactions(30)
    for outcome in ("commit", "abort", "commit", "abort"):
        producer.begin_transaction()
        for i in range(3):
            producer.produce("r", value=f"{outcome}-{i}".encode(), partition=0)
        producer.flush(30)
        if outcome == "commit":
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    # commit 0-2 marker 3, abort 4-6 marker 7, commit 8-10 marker 11, abort 12-14 marker 15
    wait_for(lambda: end_offsets(bootstrap, "r", 1)[0] == 16, what="LSO 16")

    assert offsets(read(bootstrap, 0, 16)) == [0, 1, 2, 8, 9, 10]
    assert offsets(read(bootstrap, 3, 8)) == []  # only a marker and aborted records
    assert offsets(read(bootstrap, 2, 9)) == [2, 8]
    assert offsets(read(bootstrap, 11, 16)) == []


def test_records_deleted_below_the_range(broker: Broker) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "r", partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(100):
        producer.produce("r", value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_records([TopicPartition("r", 0, 60)])[TopicPartition("r", 0, 60)].result(30)

    with pytest.raises(DataLossError, match=r"Offsets \[10, 60\) of topic 'r' partition 0"):
        read(bootstrap, 10, 90)
    assert offsets(read(bootstrap, 10, 90, fail=False)) == list(range(60, 90))
    assert offsets(read(bootstrap, 10, 50, fail=False)) == []
