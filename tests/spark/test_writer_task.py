"""The sink's write task without Spark, against a real broker: a replayed (query, partition,
batch) writes nothing, a zombie attempt is fenced, a failed attempt leaves nothing visible."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest
from confluent_kafka import KafkaException, Producer
from pyspark.sql.types import StringType, StructField, StructType

from riverbed.broker import Broker
from riverbed.spark.errors import SinkWriteError
from riverbed.spark.sink.config import SinkPlan
from riverbed.spark.sink.task import (
    TaskOutcome,
    TaskState,
    WriteTask,
    committed_progress,
    sink_id,
    write_task,
)
from tests.support.brokers import create_topic
from tests.support.sink_job import read_output

SCHEMA = StructType([StructField("key", StringType()), StructField("value", StringType())])
TOPIC = "out"


@pytest.fixture
def plan(broker: Broker) -> SinkPlan:
    create_topic(broker.bootstrap_servers, TOPIC, partitions=2)
    return SinkPlan.build(
        {"kafka.bootstrap.servers": broker.bootstrap_servers, "topic": TOPIC}, SCHEMA
    )


def _batches(*values: str) -> list[pa.RecordBatch]:
    """One record batch per value (keys k0, k1, ...), as Spark hands them to write()."""
    return [
        pa.record_batch([pa.array([f"k{i}"]), pa.array([value])], names=["key", "value"])
        for i, value in enumerate(values)
    ]


def _written(plan: SinkPlan) -> list[bytes | None]:
    bootstrap = str(plan.producer["bootstrap.servers"])
    return sorted(r.value for r in read_output(bootstrap, TOPIC, partitions=2))


def _write(plan: SinkPlan, task: WriteTask, *values: str) -> TaskOutcome:
    return write_task(plan, _batches(*values), task)


def test_a_replayed_task_writes_nothing(plan: SinkPlan) -> None:
    task = WriteTask(job="query-1", partition=0, batch_id=0)
    first = _write(plan, task, "a", "b", "c")
    again = _write(plan, task, "a", "b", "c")
    assert (first.state, first.rows) == (TaskState.WRITTEN, 3)
    assert (again.state, again.rows) == (TaskState.SKIPPED, 3)
    assert _written(plan) == [b"a", b"b", b"c"]


def test_the_next_batch_is_written_and_an_older_one_skipped(plan: SinkPlan) -> None:
    _write(plan, WriteTask(job="q", partition=0, batch_id=0), "a")
    assert _write(plan, WriteTask(job="q", partition=0, batch_id=1), "b").state is (
        TaskState.WRITTEN
    )
    assert _write(plan, WriteTask(job="q", partition=0, batch_id=0), "a").state is (
        TaskState.SKIPPED
    )
    progress = committed_progress(plan, sink_id("q", 0))
    assert progress is not None
    assert (progress.next_batch_id, progress.rows) == (2, 1)
    assert _written(plan) == [b"a", b"b"]


def test_partitions_and_queries_have_their_own_progress(plan: SinkPlan) -> None:
    states = [
        _write(plan, WriteTask(job=job, partition=partition, batch_id=5), f"{job}{partition}").state
        for job in ("q1", "q2")
        for partition in (0, 1)
    ]
    assert states == [TaskState.WRITTEN] * 4
    assert _written(plan) == [b"q10", b"q11", b"q20", b"q21"]


def test_a_replay_with_other_rows_fails_instead_of_guessing(plan: SinkPlan) -> None:
    task = WriteTask(job="q", partition=0, batch_id=3)
    _write(plan, task, "a", "b")
    with pytest.raises(SinkWriteError, match="committed with 2 rows but is replayed with 3"):
        _write(plan, task, "a", "b", "c")
    assert _written(plan) == [b"a", b"b"]


def test_an_attempt_that_fails_midway_leaves_nothing_and_its_retry_writes_once(
    plan: SinkPlan,
) -> None:
    task = WriteTask(job="q", partition=0, batch_id=0)

    def failing() -> Iterator[pa.RecordBatch]:
        yield from _batches("a", "b")
        raise RuntimeError("the executor lost its input")

    with pytest.raises(RuntimeError, match="lost its input"):
        write_task(plan, failing(), task)
    assert _written(plan) == []
    assert committed_progress(plan, sink_id("q", 0)) is None
    assert _write(plan, task, "a", "b", "c").state is TaskState.WRITTEN
    assert _written(plan) == [b"a", b"b", b"c"]


def test_a_zombie_attempt_is_fenced_and_its_open_transaction_aborted(plan: SinkPlan) -> None:
    task = WriteTask(job="q", partition=1, batch_id=7)
    zombie = Producer({**plan.producer, "transactional.id": task.transactional_id})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(TOPIC, b"zombie")
    zombie.flush(30)
    assert _write(plan, task, "a").state is TaskState.WRITTEN
    with pytest.raises(KafkaException):
        zombie.commit_transaction(30)
    assert _written(plan) == [b"a"]


def test_an_empty_task_writes_nothing_and_records_no_progress(plan: SinkPlan) -> None:
    task = WriteTask(job="q", partition=0, batch_id=0)
    empty = pa.record_batch([pa.array([], pa.string())] * 2, names=["key", "value"])
    outcome = write_task(plan, [empty, empty], task)
    assert (outcome.state, outcome.rows) == (TaskState.EMPTY, 0)
    assert committed_progress(plan, sink_id("q", 0)) is None
    assert _write(plan, task, "a").state is TaskState.WRITTEN


def test_the_task_clients_reconnect_after_10_ms_unless_the_options_say_otherwise() -> None:
    """Each task starts new clients; librdkafka's 100 ms default made each wait about 50 ms
    before it connected to the broker it learned (sink.config.RECONNECT_BACKOFF_MS)."""
    default = SinkPlan.build({"kafka.bootstrap.servers": "b:9092", "topic": TOPIC}, SCHEMA)
    chosen = SinkPlan.build(
        {"kafka.bootstrap.servers": "b:9092", "kafka.reconnect.backoff.ms": "250", "topic": TOPIC},
        SCHEMA,
    )
    assert default.producer["reconnect.backoff.ms"] == "10"
    assert default.client_settings()["reconnect.backoff.ms"] == "10"
    assert chosen.client_settings()["reconnect.backoff.ms"] == "250"
