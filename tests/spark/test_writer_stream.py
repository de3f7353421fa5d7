"""The ``riverbed`` sink in streaming queries with a checkpoint: copy jobs from files and from
the ``riverbed`` source, their restarts, and micro-batches Spark replays after their commit
was lost, read back read_committed."""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from riverbed.broker import Broker
from riverbed.testing.topic_reader import TopicRecord
from tests.support.brokers import create_topic
from tests.support.sink_job import INPUT_SCHEMA, ROWS_PER_FILE, read_output, write_input
from tests.support.spark_reader import produce


def run_copy(spark: SparkSession, bootstrap: str, source: Path, checkpoint: Path) -> StreamingQuery:
    """Copy every file not yet in the checkpoint (one per micro-batch, two write tasks each)
    to topic ``out``, and wait until done."""
    rows = (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .repartition(2, "id")
        .select(
            F.col("id").cast("string").alias("key"),
            F.to_json(F.struct("id", "payload")).alias("value"),
        )
    )
    return write_all(rows, bootstrap, checkpoint)


def write_all(rows: DataFrame, bootstrap: str, checkpoint: Path) -> StreamingQuery:
    """Write what ``rows`` has now (availableNow) to topic ``out`` and wait until done."""
    query = (
        rows.writeStream.format("riverbed")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", "out")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert not query.isActive, "the copy did not finish in 120 s"
    assert query.exception() is None, query.exception()
    return query


def forget_commit(checkpoint: Path, batch_id: int) -> None:
    """Remove the batch from the checkpoint's commit log (the entry and its Hadoop checksum),
    as if the driver died between the sink's commit and Spark's record of it."""
    for name in (str(batch_id), f".{batch_id}.crc"):
        (checkpoint / "commits" / name).unlink()


def copied_ids(bootstrap: str) -> list[int]:
    ids = []
    for record in read_output(bootstrap, "out", partitions=2):
        assert record.value is not None
        row = json.loads(record.value)
        assert record.key == str(row["id"]).encode()
        ids.append(row["id"])
    return sorted(ids)


def copy_three_files(
    spark: SparkSession, bootstrap: str, tmp_path: Path
) -> tuple[Path, Path, StreamingQuery]:
    """Topic ``out`` created and three input files copied into it: the input directory, the
    checkpoint and the finished query."""
    create_topic(bootstrap, "out", partitions=2)
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    write_input(source, range(3))
    return source, checkpoint, run_copy(spark, bootstrap, source, checkpoint)


def test_a_copy_job_restarted_from_its_checkpoint_writes_each_row_once(
    spark: SparkSession, broker: Broker, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    source, checkpoint, first = copy_three_files(spark, bootstrap, tmp_path)
    assert copied_ids(bootstrap) == list(range(3 * ROWS_PER_FILE))
    write_input(source, range(3, 5))
    second = run_copy(spark, bootstrap, source, checkpoint)
    assert second.id == first.id  # the sink's transactional ids stay the same
    assert [p["batchId"] for p in second.recentProgress] == [3, 4]
    assert copied_ids(bootstrap) == list(range(5 * ROWS_PER_FILE))


def test_a_batch_spark_replays_after_losing_its_commit_is_not_written_again(
    spark: SparkSession, broker: Broker, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    source, checkpoint, _ = copy_three_files(spark, bootstrap, tmp_path)
    # As if the driver died after the tasks committed and before Spark recorded batch 2:
    # Spark replays it with the same id, offsets and rows, and the sink must skip it.
    forget_commit(checkpoint, 2)
    write_input(source, range(3, 4))
    replay = run_copy(spark, bootstrap, source, checkpoint)
    assert [p["batchId"] for p in replay.recentProgress] == [2, 3]
    assert [p["numInputRows"] for p in replay.recentProgress] == [ROWS_PER_FILE] * 2
    assert copied_ids(bootstrap) == list(range(4 * ROWS_PER_FILE))


def _mirror(spark: SparkSession, bootstrap: str, checkpoint: Path) -> StreamingQuery:
    """Copy topic ``in`` to ``out`` partition by partition, with keys, headers, timestamps."""
    rows = (
        spark.readStream.format("riverbed")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .option("maxOffsetsPerTrigger", 100)
        .load()
        .select("key", "value", "headers", "partition", "timestamp")
    )
    return write_all(rows, bootstrap, checkpoint)


def _content(records: list[TopicRecord]) -> list[tuple[object, ...]]:
    return [(r.partition, r.key, r.value, r.headers, r.timestamp_ms) for r in records]


def _produce_input(bootstrap: str, numbers: range) -> None:
    produce(
        bootstrap,
        "in",
        [(i % 2, f"k{i}".encode(), f"v{i}".encode(), 1_767_225_600_000 + i) for i in numbers],
        headers=[("h", b"x")],
    )


def test_a_riverbed_to_riverbed_mirror_is_exact_across_a_restart_and_a_replay(
    spark: SparkSession, broker: Broker, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "in", partitions=2)
    create_topic(bootstrap, "out", partitions=2)
    checkpoint = tmp_path / "checkpoint"
    _produce_input(bootstrap, range(300))
    first = _mirror(spark, bootstrap, checkpoint)
    last = first.lastProgress["batchId"]
    forget_commit(checkpoint, last)  # Spark replays it after the restart
    _produce_input(bootstrap, range(300, 400))
    second = _mirror(spark, bootstrap, checkpoint)
    assert second.recentProgress[0]["batchId"] == last
    source = _content(read_output(bootstrap, "in", partitions=2))
    copy = _content(read_output(bootstrap, "out", partitions=2))
    assert len(copy) == 400
    assert sorted(copy, key=lambda r: r[0]) == sorted(source, key=lambda r: r[0])  # order kept
