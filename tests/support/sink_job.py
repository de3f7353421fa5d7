"""A streaming copy job into the ``riverbed`` sink, run as its own process by the crash tests;
the input files it copies (:func:`write_input`), and the reader the sink tests check the
output with (:func:`read_output`).

    python tests/support/sink_job.py --bootstrap HOST:PORT (--input DIR | --source-topic T) \
        --checkpoint DIR --topic T [--crash-in-write BATCH | --crash-after-commit BATCH]

The job reads JSON files ``{"id": int, "payload": str}`` from ``--input`` one file per
micro-batch (a deterministic, replayable source), hash-partitions them by id into two write
tasks, and writes ``key = id``, ``value = the row as JSON`` to ``--topic`` with
``trigger(availableNow=True)``: it ends when every file is written. It prints
``sink job done`` then. With ``--source-topic`` it copies that topic instead, read with the
riverbed source, :data:`SOURCE_RECORDS_PER_BATCH` records per micro-batch.

The crash options kill the whole job with SIGKILL (its process group, which the test made
it lead, and the Python worker doing it) at a chosen point of micro-batch ``BATCH``:

- ``--crash-in-write``: in a write task, after every row went to the producer and before the
  transaction commits (an open transaction is left behind);
- ``--crash-after-commit``: in the driver's ``commit``, after every task committed its
  transaction and before Spark records the batch in the checkpoint (the restart replays it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import LongType, StringType, StructField, StructType

import riverbed.spark
from riverbed.spark.datasource import RiverbedDataSource
from riverbed.spark.sink.writer import BATCH_ID_PROPERTY, SinkCommitMessage, StreamWriter
from riverbed.testing.topic_reader import READ_COMMITTED, TopicRecord, read_to_end

INPUT_SCHEMA = StructType([StructField("id", LongType()), StructField("payload", StringType())])
CRASHING_SOURCE = "riverbed-crashing"
DONE = "sink job done"


ROWS_PER_FILE = 50


def write_input(directory: Path, files: range) -> None:
    """JSON files ``part-NNNN.json`` of ``ROWS_PER_FILE`` rows ``{"id", "payload"}`` each,
    ids unique across files; written whole, then renamed, as a file source expects."""
    directory.mkdir(parents=True, exist_ok=True)
    for number in files:
        rows = (
            json.dumps({"id": number * ROWS_PER_FILE + i, "payload": f"p{number}-{i}"})
            for i in range(ROWS_PER_FILE)
        )
        temporary = directory / f".part-{number:04d}.tmp"
        temporary.write_text("\n".join(rows) + "\n")
        temporary.rename(directory / f"part-{number:04d}.json")


def read_output(
    bootstrap: str, topic: str, *, partitions: int, isolation: str = READ_COMMITTED
) -> list[TopicRecord]:
    """:func:`riverbed.testing.topic_reader.read_to_end` of what a sink wrote (read_committed
    unless ``isolation`` says otherwise), for the sink tests against an in-process broker."""
    records = read_to_end(bootstrap, topic, partitions=partitions, isolation=isolation)
    # The consumer's last Fetch may still wait (fetch.wait.max.ms) on the broker, and the
    # broker's stop() waits up to 5 s for a connection closed meanwhile: let it answer.
    time.sleep(0.1)
    return records


def _die(pgid: int) -> None:
    """SIGKILL the job's process group (driver and JVM) and this worker (which Spark's
    daemon put in a group of its own)."""
    os.killpg(pgid, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


class CrashingStreamWriter(StreamWriter):
    """The sink's writer, killing the job at one point of one batch."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        super().__init__(options, schema)
        self.pgid = int(options.get("crashpgid", "0"))
        self.in_write = int(options.get("crashinwrite", "-1"))
        self.after_commit = int(options.get("crashaftercommit", "-1"))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None
        if int(context.getLocalProperty(BATCH_ID_PROPERTY) or -1) != self.in_write:
            return super().write(iterator)

        def then_die() -> Iterator[pa.RecordBatch]:
            yield from iterator
            time.sleep(0.5)  # librdkafka sends the rows (linger.ms 5) into the open txn
            _die(self.pgid)

        return super().write(then_die())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        super().commit(messages, batchId)
        if batchId == self.after_commit:
            _die(self.pgid)


class CrashingDataSource(RiverbedDataSource):
    @classmethod
    def name(cls) -> str:
        return CRASHING_SOURCE

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return CrashingStreamWriter(dict(self.options), schema)


SOURCE_RECORDS_PER_BATCH = 500


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", help="a directory of JSON files to copy")
    parser.add_argument("--source-topic", help="a topic to copy, read with the riverbed source")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--crash-in-write", type=int, default=-1)
    parser.add_argument("--crash-after-commit", type=int, default=-1)
    args = parser.parse_args(argv)
    spark = riverbed.spark.session(
        "riverbed-sink-job",
        master="local[2]",
        log_level="ERROR",
        config={"spark.sql.shuffle.partitions": "2"},
    )
    spark.dataSource.register(CrashingDataSource)
    if args.source_topic:
        rows = (
            spark.readStream.format("riverbed")
            .option("kafka.bootstrap.servers", args.bootstrap)
            .option("subscribe", args.source_topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", SOURCE_RECORDS_PER_BATCH)
            .load()
            .repartition(2, "key")
            .select(F.col("key").cast("string").alias("key"), "value")
        )
    else:
        rows = (
            spark.readStream.schema(INPUT_SCHEMA)
            .option("maxFilesPerTrigger", 1)
            .json(args.input)
            .repartition(2, "id")
            .select(
                F.col("id").cast("string").alias("key"),
                F.to_json(F.struct("id", "payload")).alias("value"),
            )
        )
    query = (
        rows.writeStream.format(CRASHING_SOURCE)
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.topic)
        .option("checkpointLocation", args.checkpoint)
        .option("crashPgid", str(os.getpgrp()))
        .option("crashInWrite", str(args.crash_in_write))
        .option("crashAfterCommit", str(args.crash_after_commit))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print(DONE, flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
