"""One write task of the riverbed sink, as a streaming query runs it batch after batch.

    .venv/bin/python benchmarks/sink_task.py [--tasks 40] [--rows 150]

Starts ``riverbed broker`` as its own process, then calls the sink's ``write_task`` (no
Spark) ``--tasks`` times for one (query, partition), batch ids 0, 1, 2, ..., each with
``--rows`` rows: what every write task of every micro-batch does (a new transactional
producer, ``init_transactions``, the progress read, the rows and the progress in one
transaction). Prints the median, p90 and max per task, the first three left out, for:

- ``sink``: the sink as it is;
- ``librdkafka defaults``: with ``kafka.reconnect.backoff.ms`` 100 (librdkafka's default);
- ``bare producer``: one transactional producer kept across the tasks (no new clients, no
  init, no progress read): the floor, not something the sink can do (see sink/task.py).

Not part of the test run; results go in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
from _common import machine, percentile, start_broker
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from pyspark.sql.types import StringType, StructField, StructType

from riverbed.spark.sink.config import SinkPlan
from riverbed.spark.sink.task import TaskState, WriteTask, write_task

SCHEMA = StructType([StructField("key", StringType()), StructField("value", StringType())])
TOPIC = "out"
SKIPPED = 3
LIBRDKAFKA_BACKOFF = {"kafka.reconnect.backoff.ms": "100"}


def rows(count: int) -> list[pa.RecordBatch]:
    keys = pa.array([f"k{i}" for i in range(count)])
    values = pa.array(["x" * 100] * count)
    return [pa.record_batch([keys, values], names=["key", "value"])]


def timed(tasks: int, one: Callable[[int], None]) -> list[float]:
    times = []
    for batch_id in range(tasks):
        started = time.perf_counter()
        one(batch_id)
        times.append((time.perf_counter() - started) * 1000)
    return times[SKIPPED:]


def sink_tasks(bootstrap: str, job: str, args: argparse.Namespace, **options: str) -> list[float]:
    plan = SinkPlan.build({"kafka.bootstrap.servers": bootstrap, "topic": TOPIC, **options}, SCHEMA)

    def one(batch_id: int) -> None:
        task = WriteTask(job=job, partition=0, batch_id=batch_id)
        outcome = write_task(plan, rows(args.rows), task)
        if outcome.state is not TaskState.WRITTEN:
            raise SystemExit(f"batch {batch_id}: {outcome}")

    return timed(args.tasks, one)


def bare_producer(bootstrap: str, args: argparse.Namespace) -> list[float]:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "bare"})
    producer.init_transactions(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bare"})
    group = consumer.consumer_group_metadata()
    consumer.close()

    def one(batch_id: int) -> None:
        producer.begin_transaction()
        for i in range(args.rows):
            producer.produce(TOPIC, b"x" * 100, key=b"k%d" % i)
        producer.flush(30)
        producer.send_offsets_to_transaction([TopicPartition(TOPIC, 0, batch_id + 1)], group, 30)
        producer.commit_transaction(30)

    return timed(args.tasks, one)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--rows", type=int, default=150)
    args = parser.parse_args()
    print(machine(), flush=True)
    with tempfile.TemporaryDirectory() as root:
        process, bootstrap = start_broker(Path(root) / "data")
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(TOPIC, num_partitions=2)])[TOPIC].result(30)
            for name, times in (
                ("sink", sink_tasks(bootstrap, "now", args)),
                (
                    "librdkafka defaults",
                    sink_tasks(bootstrap, "defaults", args, **LIBRDKAFKA_BACKOFF),
                ),
                ("bare producer", bare_producer(bootstrap, args)),
            ):
                print(
                    f"{name:20s} {len(times)} tasks of {args.rows} rows: median "
                    f"{statistics.median(times):6.1f} ms, p90 {percentile(times, 0.9):6.1f} ms, "
                    f"max {max(times):6.1f} ms",
                    flush=True,
                )
        finally:
            process.terminate()
            process.wait(60)


if __name__ == "__main__":
    main()
