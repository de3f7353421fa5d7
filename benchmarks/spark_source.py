"""The riverbed PySpark data source against the API's ceiling, on local[2].

    .venv/bin/python benchmarks/spark_source.py [--records 1000000] [--repeat 3]

Starts ``riverbed broker`` as its own process, produces ``--records`` records of 100 bytes
over 4 partitions, then, in one local[2] SparkSession (started before the clock runs):

1. **Source**: ``readStream.format("riverbed")`` from earliest with
   ``Trigger.AvailableNow`` into a streaming aggregation (count per partition, complete mode,
   memory sink): rows/s from the query's start to its end (target: >= 300k rows/s).
2. **Ceiling**: the same query over a Python data source that yields the same rows (same
   schema, 4 partitions, Arrow batches built in ``read()``) from memory, so the difference
   is what reading from the broker costs; the ratio is printed.
3. **Sink**: the riverbed source copied to a new topic through the riverbed sink
   (transactional, exactly once), AvailableNow: rows/s.

Each measurement runs ``--repeat`` times; medians. Not part of the test run; results go in
BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from _common import MESSAGE_BYTES, PRODUCER_SETTINGS, machine, start_broker
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

import riverbed.spark
from riverbed.spark.source.schema import arrow_schema, source_schema
from riverbed.testing.topic_reader import count_to_end

PARTITIONS = 4
CHUNK_ROWS = 50_000


def create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])[topic].result(timeout=30)


def fill(bootstrap: str, topic: str, records: int) -> None:
    create(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_SETTINGS})
    payload = b"x" * MESSAGE_BYTES
    for i in range(records):
        producer.produce(topic, payload, key=b"%08d" % i, partition=i % PARTITIONS)
        if i % 100_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0


class _Range(InputPartition):
    def __init__(self, partition: int, rows: int) -> None:
        self.partition = partition
        self.rows = rows


class MemoryStream(DataSourceStreamReader):
    """Yields ``rows`` records per partition once: the same shape as riverbed's rows."""

    def __init__(self, options: dict[str, str]) -> None:
        self.rows = int(options["rows"])

    def initialOffset(self) -> dict[str, int]:
        return {"done": 0}

    def latestOffset(self) -> dict[str, int]:
        return {"done": 1}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        if start == end:
            return []
        return [_Range(p, self.rows // PARTITIONS) for p in range(PARTITIONS)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Range)
        schema = arrow_schema(include_headers=False)
        value = b"x" * MESSAGE_BYTES
        for start in range(0, partition.rows, CHUNK_ROWS):
            n = min(CHUNK_ROWS, partition.rows - start)
            offsets = list(range(start, start + n))
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([b"%08d" % o for o in offsets], pa.binary()),
                    pa.array([value] * n, pa.binary()),
                    pa.array(["bench"] * n, pa.string()),
                    pa.array([partition.partition] * n, pa.int32()),
                    pa.array(offsets, pa.int64()),
                    pa.array([1_700_000_000_000_000] * n, pa.timestamp("us", tz="UTC")),
                    pa.array([0] * n, pa.int32()),
                ],
                schema=schema,
            )

    def commit(self, end: dict[str, int]) -> None:
        pass


class MemorySource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "memory_ceiling"

    def schema(self) -> StructType:
        return source_schema(include_headers=False)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return MemoryStream(dict(self.options))


def aggregate(spark: SparkSession, reader: Any, checkpoint: Path, name: str) -> float:
    """Seconds for an AvailableNow count-per-partition over ``reader``."""
    counts = reader.load().groupBy("partition").count()
    started = time.perf_counter()
    query = (
        counts.writeStream.format("memory")
        .queryName(name)
        .outputMode("complete")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.perf_counter() - started
    total = sum(row["count"] for row in spark.sql(f"select * from {name}").collect())
    return seconds if total else float("nan")


def copy(spark: SparkSession, bootstrap: str, source: str, target: str, checkpoint: Path) -> float:
    frame = (
        spark.readStream.format("riverbed")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .select("key", "value")
    )
    started = time.perf_counter()
    query = (
        frame.writeStream.format("riverbed")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", target)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    records = args.records
    print(f"machine: {machine()}")
    print(f"{records:,} records of {MESSAGE_BYTES} B over {PARTITIONS} partitions, local[2]")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        process, bootstrap = start_broker(root / "data")
        spark = riverbed.spark.session("benchmark", master="local[2]", log_level="ERROR")
        spark.dataSource.register(MemorySource)
        try:
            fill(bootstrap, "bench", records)
            source_s, ceiling_s, sink_s = [], [], []
            for run in range(args.repeat):
                riverbed_reader = (
                    spark.readStream.format("riverbed")
                    .option("kafka.bootstrap.servers", bootstrap)
                    .option("subscribe", "bench")
                    .option("startingOffsets", "earliest")
                )
                source_s.append(
                    aggregate(spark, riverbed_reader, root / f"cp-src-{run}", f"src{run}")
                )
                memory_reader = spark.readStream.format("memory_ceiling").option("rows", records)
                ceiling_s.append(
                    aggregate(spark, memory_reader, root / f"cp-mem-{run}", f"mem{run}")
                )
                target = f"copy-{run}"
                create(bootstrap, target)
                sink_s.append(copy(spark, bootstrap, "bench", target, root / f"cp-sink-{run}"))
                copied = count_to_end(
                    bootstrap, target, partitions=PARTITIONS, isolation="read_committed"
                )
                print(
                    f"run {run + 1}: source {records / source_s[-1]:,.0f} rows/s, ceiling "
                    f"{records / ceiling_s[-1]:,.0f} rows/s, sink {records / sink_s[-1]:,.0f} "
                    f"rows/s ({copied:,} records copied, read_committed)",
                    flush=True,
                )
            source = records / statistics.median(source_s)
            ceiling = records / statistics.median(ceiling_s)
            sink = records / statistics.median(sink_s)
            print(
                f"medians: source {source:,.0f} rows/s (target >= 300,000), ceiling "
                f"{ceiling:,.0f} rows/s, source/ceiling {source / ceiling:.0%}, sink "
                f"{sink:,.0f} rows/s"
            )
        finally:
            spark.stop()
            process.terminate()
            process.wait(60)


if __name__ == "__main__":
    sys.exit(main())
