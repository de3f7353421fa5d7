"""One write task of the ``riverbed`` sink: its rows and its progress in one Kafka transaction.

A task is identified by its *job* and its Spark partition id ``P``; in a streaming query the
job is the query id (``sql.streaming.queryId``, kept in the checkpoint, so the same after a
restart), in a batch write a random token per ``save()``. The task writes batch ``B`` (the
micro-batch id; 0 in a batch write) like this:

1. A transactional producer with ``transactional.id = riverbed-sink-{job}-{P}`` calls
   ``init_transactions``: the broker bumps the id's epoch, which aborts a transaction an
   earlier attempt of the task left open and fences that attempt (anything it still sends
   or commits is refused with PRODUCER_FENCED).
2. The task reads the committed offsets of the consumer group ``riverbed-sink-{job}-{P}``
   (its *progress*; OffsetFetch with require_stable). If the highest is ``B + 1`` or more,
   an earlier attempt already committed batch ``B``: the task writes nothing (a *skip*).
3. Otherwise it begins a transaction, produces every row, flushes, adds the offset ``B + 1``
   for its group (on partition 0 of the first row's topic, any existing partition would do)
   to the transaction with ``send_offsets_to_transaction``, and commits.

The rows and the progress commit atomically, so for ``read_committed`` readers each batch of
each task is written exactly once, whatever crashes:

- killed while writing (transaction open): the rows are never visible; the retried or
  replayed task's ``init_transactions`` aborts them (or the broker does, after
  ``transaction.timeout.ms``, if no attempt comes), and the task writes the batch again;
- killed after the commit, before Spark recorded the batch (the commit's answer lost, the
  executor or the driver died): the replayed task finds ``B + 1`` and skips;
- a zombie attempt still running beside its retry: the later ``init_transactions`` fenced
  it, so it can commit nothing; whichever attempt commits first is the one that counts;
- the broker killed during the commit: a decided commit is completed when it restarts, and
  librdkafka retries the commit.

What this needs from Spark: a replayed batch holds the same rows in the same partitions (the
source is deterministic, as Spark requires for exactly-once, and the plan and settings that
decide the partitioning do not change across the restart). The progress records how many
rows were written; a skip whose input has a different number of rows raises
:class:`SinkWriteError` instead of silently duplicating or losing rows. A task whose input is
empty writes nothing and opens no transaction.

The progress groups and transactional ids stay on the broker; the broker forgets them after
``offsets.retention.minutes`` (an empty group) and ``transactional.id.expiration.ms``, both
7 days by default, which is also how long a stopped query can be restarted exactly once.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Any

import pyarrow as pa
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from riverbed.spark.errors import SinkWriteError
from riverbed.spark.sink.config import SinkPlan
from riverbed.spark.sink.rows import produce_batches, row_topic
from riverbed.spark.worker_gc import freeze_survivors

__all__ = ["TaskOutcome", "TaskState", "WriteTask", "sink_id", "write_task"]

CLIENT_TIMEOUT_S = 60.0
"""How long a transactional call (init, send offsets, commit) may block: Kafka's producer
``max.block.ms`` default (60 s)."""
COMMIT_ATTEMPTS = 5
"""Tries of ``commit_transaction`` when it fails with a retriable error."""
PROGRESS_PARTITION = 0
"""The partition of the first row's topic that carries the task's progress (every topic has
a partition 0)."""
ID_PREFIX = "riverbed-sink"

LIBRDKAFKA_LOG = logging.getLogger("riverbed.spark.librdkafka")
"""librdkafka's log of a write task's clients (the source's too): Python shows its warnings
and errors in the worker's stderr, which Spark copies to the driver's, and drops the rest,
e.g. "Purging 1 unserved events from background queue" at each admin client's end."""


def sink_id(job: str, partition: int) -> str:
    """The transactional id and progress group of write task ``partition`` of ``job``."""
    return f"{ID_PREFIX}-{job}-{partition}"


class TaskState(Enum):
    WRITTEN = "written"
    """The task's rows and progress committed in one transaction."""
    SKIPPED = "skipped"
    """An earlier attempt had committed this batch; nothing was written."""
    EMPTY = "empty"
    """The task had no rows; nothing was written."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteTask:
    """Which task is writing: partition ``partition`` of batch ``batch_id`` of ``job``."""

    job: str
    partition: int
    batch_id: int

    @property
    def transactional_id(self) -> str:
        return sink_id(self.job, self.partition)

    @property
    def progress_group(self) -> str:
        return sink_id(self.job, self.partition)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskOutcome:
    """What a task did, for the driver's ``commit``/``abort`` (a WriterCommitMessage)."""

    partition: int
    batch_id: int
    state: TaskState
    rows: int
    """Rows written; for a skip, the rows the earlier attempt wrote."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    """The progress a task commits: the next batch to write, and what the last one held."""

    next_batch_id: int
    rows: int

    def metadata(self, task: WriteTask) -> str:
        """The offset's metadata (at most 4096 bytes on Kafka; this is ~100)."""
        return json.dumps(
            {"job": task.job, "batch": self.next_batch_id - 1, "rows": self.rows},
            separators=(",", ":"),
        )

    @classmethod
    def parse(cls, offset: int, metadata: str | None) -> Progress:
        try:
            rows = int(json.loads(metadata or "{}").get("rows", -1))
        except (ValueError, AttributeError):
            rows = -1
        return cls(next_batch_id=offset, rows=rows)


def _non_empty(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    return (batch for batch in batches if batch.num_rows)


def committed_progress(plan: SinkPlan, group: str) -> Progress | None:
    """The group's committed progress (its highest offset), or None if it has none."""
    settings: dict[str, Any] = {**plan.client_settings(), "logger": LIBRDKAFKA_LOG}
    admin = AdminClient(settings)
    request = [ConsumerGroupTopicPartitions(group)]
    future = admin.list_consumer_group_offsets(
        request, require_stable=True, request_timeout=CLIENT_TIMEOUT_S
    )[group]
    try:
        answer = future.result(timeout=CLIENT_TIMEOUT_S)
    except KafkaException as e:
        raise SinkWriteError(f"could not read the progress of {group!r}: {e}") from e
    best: Progress | None = None
    for tp in answer.topic_partitions or []:
        if tp.error is not None:
            raise SinkWriteError(f"could not read the progress of {group!r}: {tp.error}")
        if tp.offset >= 0 and (best is None or tp.offset > best.next_batch_id):
            best = Progress.parse(tp.offset, tp.metadata)
    return best


def _group_metadata(plan: SinkPlan, group: str) -> object:
    """``ConsumerGroupMetadata`` of ``group`` for send_offsets_to_transaction: a consumer
    that never subscribes has generation -1, which the broker accepts for a group with no
    members (as Kafka does)."""
    consumer = Consumer({**plan.client_settings(), "group.id": group, "logger": LIBRDKAFKA_LOG})
    try:
        return consumer.consumer_group_metadata()
    finally:
        consumer.close()


class _DeliveryErrors:
    """The first failed delivery (librdkafka reports only failures: the config sets
    ``delivery.report.only.error``)."""

    def __init__(self) -> None:
        self.first: KafkaError | None = None
        self.topic: str | None = None

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        if error is not None and self.first is None:
            self.first, self.topic = error, message.topic()

    def check(self) -> None:
        if self.first is not None:
            raise SinkWriteError(f"writing to topic {self.topic!r} failed: {self.first.str()}")


def _commit(producer: Producer, task: WriteTask) -> None:
    for attempt in itertools.count(1):
        try:
            producer.commit_transaction(CLIENT_TIMEOUT_S)
            return
        except KafkaException as e:
            error = e.args[0]
            if isinstance(error, KafkaError) and error.retriable() and attempt < COMMIT_ATTEMPTS:
                continue
            raise SinkWriteError(
                f"committing the transaction of {task.transactional_id!r} failed: {e}"
            ) from e


def _abort_quietly(producer: Producer) -> None:
    """Abort the open transaction, if any; the next ``init_transactions`` of the id (or the
    broker's timeout) aborts it anyway, so a failure here changes nothing."""
    with contextlib.suppress(KafkaException):
        producer.abort_transaction(CLIENT_TIMEOUT_S)


def _init_transactions(producer: Producer, task: WriteTask) -> None:
    """``init_transactions`` of a new producer, after a metadata request for all topics.

    librdkafka drops its bootstrap connection once it has learned the brokers; when
    ``init_transactions`` asks for the transaction coordinator in that gap, it finds no
    broker and waits for its coordinator timer, 500 ms. Measured on one broker, 23
    inits each, every one right after a commit of the same id (as a sink's next batch does):
    a median of 507 ms with librdkafka's defaults; 19 ms with the sink's
    ``reconnect.backoff.ms`` but a p90 of 510 ms; 20 ms, p90 21 ms, with the metadata
    request first, which returns once the client holds a connection to a broker it
    learned."""
    try:
        producer.list_topics(timeout=CLIENT_TIMEOUT_S)
        producer.init_transactions(CLIENT_TIMEOUT_S)
    except KafkaException as e:
        raise SinkWriteError(f"init_transactions of {task.transactional_id!r} failed: {e}") from e


def write_task(plan: SinkPlan, batches: Iterable[pa.RecordBatch], task: WriteTask) -> TaskOutcome:
    """Write one task's rows exactly once (see the module docstring). Runs on an executor."""
    freeze_survivors()
    rows = _non_empty(batches)
    first = next(rows, None)
    if first is None:
        return TaskOutcome(
            partition=task.partition, batch_id=task.batch_id, state=TaskState.EMPTY, rows=0
        )
    progress_topic = row_topic(plan, first, 0)
    errors = _DeliveryErrors()
    producer = Producer(
        {
            **plan.producer,
            "transactional.id": task.transactional_id,
            "delivery.report.only.error": True,
            "on_delivery": errors,
            "logger": LIBRDKAFKA_LOG,
        }
    )
    _init_transactions(producer, task)
    done = committed_progress(plan, task.progress_group)
    if done is not None and done.next_batch_id > task.batch_id:
        return _skip(task, done, replayed_rows=first.num_rows + sum(b.num_rows for b in rows))
    producer.begin_transaction()
    try:
        count = produce_batches(producer, plan, itertools.chain([first], rows))
        remaining = producer.flush(CLIENT_TIMEOUT_S)
        errors.check()
        if remaining:
            raise SinkWriteError(
                f"{remaining} rows were not delivered within {CLIENT_TIMEOUT_S:.0f} s"
            )
        progress = Progress(next_batch_id=task.batch_id + 1, rows=count)
        offsets = [
            TopicPartition(
                progress_topic, PROGRESS_PARTITION, progress.next_batch_id, progress.metadata(task)
            )
        ]
        producer.send_offsets_to_transaction(
            offsets, _group_metadata(plan, task.progress_group), CLIENT_TIMEOUT_S
        )
        _commit(producer, task)
    except BaseException:
        _abort_quietly(producer)
        raise
    return TaskOutcome(
        partition=task.partition, batch_id=task.batch_id, state=TaskState.WRITTEN, rows=count
    )


def _skip(task: WriteTask, done: Progress, *, replayed_rows: int) -> TaskOutcome:
    if done.next_batch_id == task.batch_id + 1 and done.rows not in (-1, replayed_rows):
        raise SinkWriteError(
            f"batch {task.batch_id} of write task {task.partition} was committed with "
            f"{done.rows} rows but is replayed with {replayed_rows}: the input or its "
            "partitioning changed since, so it cannot be written exactly once"
        )
    return TaskOutcome(
        partition=task.partition,
        batch_id=task.batch_id,
        state=TaskState.SKIPPED,
        rows=done.rows if done.next_batch_id == task.batch_id + 1 else 0,
    )
