"""The ``riverbed`` sink in batch writes, against a real broker, read back with a read_committed
confluent-kafka consumer: Spark's Kafka sink columns and options, and its errors."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from riverbed.broker import Broker
from riverbed.spark.errors import SinkOptionError
from riverbed.spark.sink.writer import BatchWriter
from tests.support.brokers import create_topic
from tests.support.sink_job import read_output


@pytest.fixture
def bootstrap(broker: Broker) -> Iterator[str]:
    yield broker.bootstrap_servers


def _save(df: DataFrame, bootstrap: str, **options: str) -> None:
    writer = df.write.format("riverbed").mode("append")
    writer = writer.option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.save()


def test_batch_write_string_key_and_value_to_the_topic_option(
    spark: SparkSession, bootstrap: str
) -> None:
    create_topic(bootstrap, "out", partitions=3)
    df = spark.range(1000).select(
        F.col("id").cast("string").alias("key"), F.concat(F.lit("v"), "id").alias("value")
    )
    _save(df.repartition(4), bootstrap, topic="out")
    records = read_output(bootstrap, "out", partitions=3)
    assert sorted((r.key, r.value) for r in records) == sorted(
        (str(i).encode(), f"v{i}".encode()) for i in range(1000)
    )
    by_key: dict[bytes | None, set[int]] = {}
    for record in records:
        by_key.setdefault(record.key, set()).add(record.partition)
    assert all(len(partitions) == 1 for partitions in by_key.values())  # the key partitioner
    assert len({r.partition for r in records}) == 3


def test_batch_write_binary_columns_headers_partition_timestamp_and_topic_column(
    spark: SparkSession, bootstrap: str
) -> None:
    create_topic(bootstrap, "left", partitions=2)
    create_topic(bootstrap, "right", partitions=2)
    when = dt.datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=dt.UTC)
    rows = [
        ("left", b"k0", b"\x00\xff", 1, [("h1", b"x"), ("h2", None)], when),
        ("right", None, b"v1", 0, None, None),
        ("right", b"k2", None, None, [], when),
    ]
    df = spark.createDataFrame(
        rows,
        "topic string, key binary, value binary, partition int, "
        "headers array<struct<key: string, value: binary>>, timestamp timestamp",
    )
    _save(df, bootstrap)
    left = read_output(bootstrap, "left", partitions=2)
    right = sorted(read_output(bootstrap, "right", partitions=2), key=lambda r: r.partition)
    assert [(r.partition, r.key, r.value, r.headers) for r in left] == [
        (1, b"k0", b"\x00\xff", [("h1", b"x"), ("h2", None)])
    ]
    assert left[0].timestamp_ms == int(when.timestamp() * 1000)  # micros stripped
    assert [(r.key, r.value) for r in right] == [(None, b"v1"), (b"k2", None)]
    assert right[0].partition == 0
    assert right[0].headers is None


def test_the_topic_option_wins_over_the_topic_column(spark: SparkSession, bootstrap: str) -> None:
    create_topic(bootstrap, "chosen", partitions=1)
    df = spark.createDataFrame([("ignored", "a"), ("ignored", "b")], "topic string, value string")
    _save(df, bootstrap, topic="chosen")
    assert sorted(r.value for r in read_output(bootstrap, "chosen", partitions=1)) == [
        b"a",
        b"b",
    ]


def test_a_double_timestamp_is_seconds(spark: SparkSession, bootstrap: str) -> None:
    create_topic(bootstrap, "out", partitions=1)
    df = spark.createDataFrame([("a", 1_767_225_600.25)], "value string, timestamp double")
    _save(df, bootstrap, topic="out")
    [record] = read_output(bootstrap, "out", partitions=1)
    assert record.timestamp_ms == 1_767_225_600_250


@pytest.mark.parametrize(
    ("ddl", "options", "message"),
    [
        ("key string", {"topic": "t"}, "Required attribute 'value' not found"),
        (
            "value int",
            {"topic": "t"},
            "value attribute unsupported type int. value must be a(n) string or binary",
        ),
        (
            "key int, value string",
            {"topic": "t"},
            "key attribute unsupported type int. key must be a(n) string or binary",
        ),
        ("value string", {}, "topic option required when no 'topic' attribute is present"),
        (
            "topic int, value string",
            {},
            "topic attribute unsupported type int. topic must be a(n) string",
        ),
        (
            "value string, partition string",
            {"topic": "t"},
            "partition attribute unsupported type string. partition must be a(n) int",
        ),
        (
            "value string, headers array<string>",
            {"topic": "t"},
            "headers attribute unsupported type array<string>",
        ),
        (
            "value string, timestamp string",
            {"topic": "t"},
            "timestamp attribute unsupported type string",
        ),
        (
            "value string",
            {"topic": "t", "kafka.transactional.id": "mine"},
            "Kafka option 'transactional.id' is not supported",
        ),
        (
            "value string",
            {"topic": "t", "kafka.key.serializer": "x"},
            "Kafka option 'key.serializer' is not supported as keys are serialized",
        ),
    ],
)
def test_bad_columns_and_options_fail_naming_them(
    spark: SparkSession, bootstrap: str, ddl: str, options: dict[str, str], message: str
) -> None:
    df = spark.createDataFrame([], ddl)
    with pytest.raises(Exception, match=r"(?s)SinkOptionError.*" + re.escape(message)):
        _save(df, bootstrap, **options)


def test_a_missing_bootstrap_servers_option_fails_naming_it(spark: SparkSession) -> None:
    df = spark.createDataFrame([("a",)], "value string")
    message = re.escape("Option 'kafka.bootstrap.servers' must be specified")
    with pytest.raises(Exception, match=message):
        df.write.format("riverbed").mode("append").option("topic", "t").save()


def test_a_null_topic_fails_the_task_and_writes_nothing(
    spark: SparkSession, bootstrap: str
) -> None:
    create_topic(bootstrap, "named", partitions=1)
    df = spark.createDataFrame([("named", "a"), (None, "b")], "topic string, value string")
    with pytest.raises(Exception, match="null topic present in the data"):
        _save(df.coalesce(1), bootstrap)
    assert read_output(bootstrap, "named", partitions=1) == []


def test_a_batch_write_refuses_save_mode_overwrite_as_spark_s_kafka_sink() -> None:
    schema = StructType([StructField("value", StringType())])
    options = {"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "t"}
    BatchWriter(options, schema)
    with pytest.raises(SinkOptionError, match="Save mode Overwrite not allowed"):
        BatchWriter(options, schema, overwrite=True)
