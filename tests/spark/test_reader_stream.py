"""Streaming reads (``spark.readStream.format("riverbed")``) against a real broker."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from riverbed.broker import Broker
from tests.support.brokers import create_topic
from tests.support.spark_reader import (
    BASE_MS,
    input_rows,
    produce,
    produce_values,
    stream,
    wait_for,
)


class Collected:
    """A foreachBatch sink that keeps every row (on the driver) and can act on a batch."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.batches: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        rows = df.select("partition", "offset", "value").collect()
        with self.lock:
            self.batches.append(batch_id)
            self.rows.extend(rows)

    def count(self) -> int:
        with self.lock:
            return len(self.rows)

    def positions(self) -> list[tuple[int, int]]:
        with self.lock:
            return sorted((r.partition, r.offset) for r in self.rows)


def collect_stream(
    spark: SparkSession, bootstrap: str, **options: str
) -> tuple[StreamingQuery, Collected]:
    """A running query that hands every micro-batch (every 0.5 s) to a Collected."""
    sink = Collected()
    query = (
        stream(spark, bootstrap, **options)
        .writeStream.foreachBatch(sink)
        .trigger(processingTime="0.5 seconds")
        .start()
    )
    return query, sink


def run_available_now(
    spark: SparkSession, bootstrap: str, checkpoint: Path, **options: str
) -> Collected:
    """Run a query with Trigger.AvailableNow to its end (or its failure)."""
    sink = Collected()
    query = (
        stream(spark, bootstrap, **options)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(60)
    finally:
        query.stop()
    return sink


def test_every_record_exactly_once_while_producing(spark: SparkSession, broker: Broker) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "events", partitions=2)
    produce_values(bootstrap, "events", 0, [f"a{i}" for i in range(20)])
    query, sink = collect_stream(spark, bootstrap, subscribe="events", startingOffsets="earliest")
    try:
        wait_for(lambda: sink.count() == 20, what="20 rows")
        produce_values(bootstrap, "events", 1, [f"b{i}" for i in range(30)])
        wait_for(lambda: sink.count() == 50, what="50 rows")
        produce_values(bootstrap, "events", 0, [f"c{i}" for i in range(25)])
        produce_values(bootstrap, "events", 1, [f"d{i}" for i in range(5)])
        wait_for(lambda: sink.count() == 80, what="80 rows")
        query.processAllAvailable()
    finally:
        query.stop()
    assert sink.positions() == [(0, o) for o in range(45)] + [(1, o) for o in range(35)]
    assert len(sink.batches) >= 3
    values = {r.value.decode() for r in sink.rows}
    assert values == {
        f"{p}{i}" for p, n in (("a", 20), ("b", 30), ("c", 25), ("d", 5)) for i in range(n)
    }


def test_streaming_aggregation_starts_at_latest_by_default(
    spark: SparkSession, broker: Broker
) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "counted", partitions=2)
    produce_values(bootstrap, "counted", 0, ["before"] * 7)  # before the query: not read
    counts = (
        stream(spark, bootstrap, subscribe="counted")
        .groupBy("partition")
        .count()
        .writeStream.outputMode("complete")
        .format("memory")
        .queryName("riverbed_counts")
        .trigger(processingTime="0.5 seconds")
        .start()
    )

    def counted() -> dict[int, int]:
        return {r.partition: r["count"] for r in spark.table("riverbed_counts").collect()}

    try:
        wait_for(lambda: counts.lastProgress is not None, what="the first batch")
        produce_values(bootstrap, "counted", 0, ["x"] * 10)
        produce_values(bootstrap, "counted", 1, ["y"] * 4)
        wait_for(lambda: counted() == {0: 10, 1: 4}, what="counts 10 and 4")
        produce_values(bootstrap, "counted", 1, ["z"] * 6)
        wait_for(lambda: counted() == {0: 10, 1: 10}, what="counts 10 and 10")
    finally:
        counts.stop()


def test_available_now_reads_what_was_there_in_limited_batches(
    spark: SparkSession, broker: Broker
) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "backlog", partitions=2)
    produce_values(bootstrap, "backlog", 0, [f"p0-{i}" for i in range(50)])
    produce_values(bootstrap, "backlog", 1, [f"p1-{i}" for i in range(50)])
    sink = Collected()

    def collect_and_produce_more(df: DataFrame, batch_id: int) -> None:
        sink(df, batch_id)
        # After prepareForTriggerAvailableNow: none of these belong to this run.
        produce_values(bootstrap, "backlog", batch_id % 2, [f"late-{batch_id}"] * 5)

    query = (
        stream(
            spark,
            bootstrap,
            subscribe="backlog",
            startingOffsets="earliest",
            maxOffsetsPerTrigger="30",
        )
        .writeStream.foreachBatch(collect_and_produce_more)
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(60)
    finally:
        query.stop()
    assert sink.positions() == [(p, o) for p in range(2) for o in range(50)]
    # 30 a batch, split across the two partitions in proportion to their backlog
    assert input_rows(query) == [30, 30, 30, 10]


def test_starting_timestamp(spark: SparkSession, broker: Broker, tmp_path: Path) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "stamped", partitions=2)
    produce(bootstrap, "stamped", [(i % 2, None, b"%d" % i, BASE_MS + i) for i in range(40)])
    sink = run_available_now(
        spark,
        bootstrap,
        tmp_path / "checkpoint",
        subscribe="stamped",
        startingTimestamp=str(BASE_MS + 25),
    )
    assert sorted(int(r.value) for r in sink.rows) == list(range(25, 40))


def test_new_partitions_and_topics_are_read_from_their_start(
    spark: SparkSession, broker: Broker
) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "grow-a", partitions=1)
    produce_values(bootstrap, "grow-a", 0, ["a0"] * 5)
    query, sink = collect_stream(
        spark, bootstrap, subscribePattern="grow-.*", startingOffsets="earliest"
    )
    try:
        wait_for(lambda: sink.count() == 5, what="5 rows")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_partitions([NewPartitions("grow-a", 2)])["grow-a"].result(30)
        create_topic(bootstrap, "grow-b", partitions=1)
        produce_values(bootstrap, "grow-a", 1, ["a1"] * 6)
        produce_values(bootstrap, "grow-b", 0, ["b0"] * 7)
        wait_for(lambda: sink.count() == 18, what="18 rows")
        query.processAllAvailable()
    finally:
        query.stop()
    got = sorted((r.value.decode(), r.partition, r.offset) for r in sink.rows)
    assert got == sorted(
        [("a0", 0, o) for o in range(5)]
        + [("a1", 1, o) for o in range(6)]
        + [("b0", 0, o) for o in range(7)]
    )


RETAINED = {"subscribe": "retained", "startingOffsets": "earliest"}


def test_fail_on_data_loss(spark: SparkSession, broker: Broker, tmp_path: Path) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "retained", partitions=1)
    produce_values(bootstrap, "retained", 0, [f"v{i}" for i in range(50)])
    first = run_available_now(spark, bootstrap, tmp_path / "checkpoint", **RETAINED)
    assert first.count() == 50
    # The checkpoint is at offset 50. Records 50..99 arrive and 50..79 are deleted.
    produce_values(bootstrap, "retained", 0, [f"v{i}" for i in range(50, 100)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deleted = admin.delete_records([TopicPartition("retained", 0, 80)])
    assert next(iter(deleted.values())).result(30).low_watermark == 80

    with pytest.raises(StreamingQueryException, match=r"Offsets \[50, 80\) of topic 'retained'"):
        run_available_now(spark, bootstrap, tmp_path / "checkpoint", **RETAINED)
    skipped = run_available_now(
        spark, bootstrap, tmp_path / "checkpoint", failOnDataLoss="false", **RETAINED
    )
    assert skipped.positions() == [(0, o) for o in range(80, 100)]


def test_a_bad_option_stops_the_stream_with_its_name(spark: SparkSession, broker: Broker) -> None:
    create_topic(broker.bootstrap_servers, "x", partitions=1)
    with pytest.raises(Exception, match="'endingOffsets' is for batch queries"):
        query = (
            stream(spark, broker.bootstrap_servers, subscribe="x", endingOffsets="latest")
            .writeStream.format("memory")
            .queryName("never")
            .start()
        )
        try:
            query.awaitTermination(30)
        finally:
            query.stop()


def test_offsets_in_the_checkpoint_are_spark_kafka_json(
    spark: SparkSession, broker: Broker, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "retained", partitions=1)
    produce_values(bootstrap, "retained", 0, ["v"] * 12)
    run_available_now(spark, bootstrap, tmp_path / "checkpoint", **RETAINED)
    last = (tmp_path / "checkpoint" / "offsets" / "0").read_text().splitlines()[-1]
    assert json.loads(last) == {"retained": {"0": 12}}


def test_a_deleted_topic_is_data_loss(spark: SparkSession, broker: Broker) -> None:
    bootstrap = broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for lenient in (True, False):
        kept, dropped = f"keep-{lenient}", f"drop-{lenient}"
        create_topic(bootstrap, kept, partitions=1)
        create_topic(bootstrap, dropped, partitions=1)
        produce_values(bootstrap, dropped, 0, ["d"] * 3)
        query, sink = collect_stream(
            spark,
            bootstrap,
            subscribe=f"{kept},{dropped}",
            startingOffsets="earliest",
            failOnDataLoss=str(not lenient).lower(),
        )
        try:
            wait_for(lambda: sink.count() == 3, what="3 rows")  # noqa: B023
            admin.delete_topics([dropped])[dropped].result(30)
            produce_values(bootstrap, kept, 0, ["k"] * 4)
            if lenient:
                wait_for(lambda: sink.count() == 7, what="7 rows")  # noqa: B023
                assert query.isActive
            else:
                with pytest.raises(
                    StreamingQueryException, match=f"Topic '{dropped}' partition 0 is gone"
                ):
                    query.awaitTermination(30)
        finally:
            query.stop()


def test_min_offsets_per_trigger_holds_small_batches_back(
    spark: SparkSession, broker: Broker
) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "trickle", partitions=1)
    produce_values(bootstrap, "trickle", 0, ["first"] * 5)
    query, sink = collect_stream(
        spark,
        bootstrap,
        subscribe="trickle",
        startingOffsets="earliest",
        minOffsetsPerTrigger="10",
        maxTriggerDelay="60s",
    )
    try:
        wait_for(lambda: sink.count() == 5, what="the first batch")  # never held back
        produce_values(bootstrap, "trickle", 0, ["second"] * 5)
        time.sleep(2)  # four triggers: 5 offsets are fewer than 10, and 60 s have not passed
        assert sink.count() == 5
        produce_values(bootstrap, "trickle", 0, ["third"] * 5)
        wait_for(lambda: sink.count() == 15, what="15 rows")
        # The sink has a batch's rows before Spark reports the batch's progress.
        wait_for(lambda: sum(input_rows(query)) == 15, what="the progress of 15 rows")
    finally:
        query.stop()
    assert input_rows(query) == [5, 10]
