"""Batch reads (``spark.read.format("riverbed")``) against a real broker and a real Spark."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from confluent_kafka import Producer
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from riverbed.broker import Broker
from riverbed.spark.source.schema import source_schema
from tests.support.brokers import create_topic
from tests.support.spark_reader import BASE_MS, Record, end_offsets, produce, wait_for


def read(spark: SparkSession, bootstrap: str, **options: str) -> DataFrame:
    reader = spark.read.format("riverbed").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def utc(timestamp_ms: int) -> dt.datetime:
    """How Spark hands a timestamp to Python in a UTC session: naive, in UTC."""
    return dt.datetime.fromtimestamp(timestamp_ms / 1000, dt.UTC).replace(tzinfo=None)


def records(count: int, *, partitions: int) -> list[Record]:
    return [
        (i % partitions, None if i % 10 == 0 else f"k{i}".encode(), f"v{i}".encode(), BASE_MS + i)
        for i in range(count)
    ]


def test_whole_topic_with_every_column(spark: SparkSession, broker: Broker) -> None:
    create_topic(broker.bootstrap_servers, "clicks", partitions=3)
    produced = records(300, partitions=3)
    produce(broker.bootstrap_servers, "clicks", produced)

    df = read(spark, broker.bootstrap_servers, subscribe="clicks")
    assert df.schema == source_schema(include_headers=False)
    rows = df.collect()
    assert len(rows) == 300
    by_value = {row.value: row for row in rows}
    for i, (partition, key, value, timestamp_ms) in enumerate(produced):
        row = by_value[value]
        assert row.key == key
        assert (row.topic, row.partition, row.offset) == ("clicks", partition, i // 3)
        assert row.timestamp == utc(timestamp_ms)
        assert row.timestampType == 0  # CreateTime


def test_offset_range_from_json_options(spark: SparkSession, broker: Broker) -> None:
    create_topic(broker.bootstrap_servers, "ranges", partitions=2)
    produce(broker.bootstrap_servers, "ranges", records(200, partitions=2))  # 100 a partition

    df = read(
        spark,
        broker.bootstrap_servers,
        assign=json.dumps({"ranges": [0, 1]}),
        startingOffsets=json.dumps({"ranges": {"0": 10, "1": -2}}),
        endingOffsets=json.dumps({"ranges": {"0": 25, "1": -1}}),
    )
    got = sorted((row.partition, row.offset) for row in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(10, 25)] + [(1, o) for o in range(100)]
    # The same plan twice reads the same rows.
    assert df.count() == 115


def test_min_partitions_splits_ranges_without_changing_rows(
    spark: SparkSession, broker: Broker
) -> None:
    create_topic(broker.bootstrap_servers, "split", partitions=2)
    produce(broker.bootstrap_servers, "split", records(1000, partitions=2))

    df = read(spark, broker.bootstrap_servers, subscribe="split", minPartitions="6")
    assert df.rdd.getNumPartitions() == 6
    offsets = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert offsets == [(p, o) for p in range(2) for o in range(500)]


def test_a_small_read_of_four_partitions_takes_two_tasks_and_every_row(
    spark: SparkSession, broker: Broker
) -> None:
    create_topic(broker.bootstrap_servers, "packed", partitions=4)
    produce(broker.bootstrap_servers, "packed", records(400, partitions=4))

    df = read(spark, broker.bootstrap_servers, subscribe="packed")
    assert df.rdd.getNumPartitions() == 2
    offsets = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert offsets == [(p, o) for p in range(4) for o in range(100)]


def test_headers(spark: SparkSession, broker: Broker) -> None:
    create_topic(broker.bootstrap_servers, "with-headers", partitions=1)
    produce(
        broker.bootstrap_servers,
        "with-headers",
        [(0, b"a", b"1", BASE_MS)],
        headers=[("trace", b"t-1"), ("empty", None), ("trace", b"t-2")],
    )
    produce(broker.bootstrap_servers, "with-headers", [(0, b"b", b"2", BASE_MS)])

    df = read(spark, broker.bootstrap_servers, subscribe="with-headers", includeHeaders="true")
    assert df.schema == source_schema(include_headers=True)
    rows = df.orderBy("offset").collect()
    assert [(h.key, h.value) for h in rows[0].headers] == [
        ("trace", b"t-1"),
        ("empty", None),
        ("trace", b"t-2"),
    ]
    assert rows[1].headers is None  # as Spark's Kafka source: null, not []


def test_starting_and_ending_timestamps(spark: SparkSession, broker: Broker) -> None:
    create_topic(broker.bootstrap_servers, "timed", partitions=2)
    produce(broker.bootstrap_servers, "timed", records(100, partitions=2))  # ts BASE_MS + i

    df = read(
        spark,
        broker.bootstrap_servers,
        subscribe="timed",
        startingTimestamp=str(BASE_MS + 40),
        endingOffsetsByTimestamp=json.dumps({"timed": {"0": BASE_MS + 60, "1": BASE_MS + 1000}}),
    )
    got = sorted(int(r.value[1:]) for r in df.select("value").collect())
    # partition 0 holds even i: 40..58; partition 1 odd i from 41 to the end (no match: latest)
    assert got == sorted([*range(40, 60, 2), *range(41, 100, 2)])

    # startingTimestamp beats startingOffsetsByTimestamp, which beats startingOffsets.
    df = read(
        spark,
        broker.bootstrap_servers,
        subscribe="timed",
        startingTimestamp=str(BASE_MS + 90),
        startingOffsetsByTimestamp=json.dumps({"timed": {"0": BASE_MS, "1": BASE_MS}}),
        startingOffsets="earliest",
    )
    assert df.count() == 10


def test_starting_timestamp_without_a_match(spark: SparkSession, broker: Broker) -> None:
    create_topic(broker.bootstrap_servers, "late", partitions=1)
    produce(broker.bootstrap_servers, "late", records(10, partitions=1))
    options = {"subscribe": "late", "startingTimestamp": str(BASE_MS + 10_000)}

    with pytest.raises(PySparkException, match="no record of topic 'late' partition 0"):
        read(spark, broker.bootstrap_servers, **options).count()
    df = read(
        spark, broker.bootstrap_servers, startingOffsetsByTimestampStrategy="latest", **options
    )
    assert df.count() == 0


def test_read_committed_by_default(spark: SparkSession, broker: Broker) -> None:
    create_topic(broker.bootstrap_servers, "txn", partitions=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "t1"})
    producer.init_transactions(30)
    for outcome in ("commit", "abort", "commit"):
        producer.begin_transaction()
        for i in range(5):
            producer.produce("txn", value=f"{outcome}-{i}".encode(), partition=0)
        producer.flush(30)  # abort_transaction drops records not sent yet
        if outcome == "commit":
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    # 10 committed + 5 aborted records and 3 markers; the markers of the last commit may
    # still be on their way, so wait until the last stable offset covers them.
    wait_for(lambda: end_offsets(broker.bootstrap_servers, "txn", 1)[0] == 18, what="LSO 18")

    values = [r.value for r in read(spark, broker.bootstrap_servers, subscribe="txn").collect()]
    assert sorted(values) == sorted([f"commit-{i}".encode() for i in range(5)] * 2)
    uncommitted = read(
        spark,
        broker.bootstrap_servers,
        subscribe="txn",
        **{"kafka.isolation.level": "read_uncommitted"},
    )
    assert uncommitted.count() == 15


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "One of the options 'subscribe', 'subscribePattern' and 'assign'"),
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "Only one of"),
        ({"subscribe": "a", "startingOffsets": "latest"}, "can't be 'latest' for batch"),
        ({"subscribe": "a", "failOnDataLoss": "maybe"}, "'failOnDataLoss' must be 'true'"),
        ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "startingOffsets"),
        ({"subscribe": "a", "kafka.no.such.setting": "1"}, "no.such.setting"),
        (
            {"subscribe": "a", "startingOffsets": '{"a":{"0":0,"7":0}}'},
            "not subscribed or absent a-7",
        ),
    ],
)
def test_bad_options_say_which(
    spark: SparkSession, broker: Broker, options: dict[str, str], message: str
) -> None:
    create_topic(broker.bootstrap_servers, "a", partitions=1)
    with pytest.raises((PySparkException, Py4JJavaError), match=message):
        read(spark, broker.bootstrap_servers, **options).collect()
