"""The writing half of the ``riverbed`` data source: Spark's Kafka sink, exactly once.

    (df.writeStream.format("riverbed")
       .option("kafka.bootstrap.servers", "127.0.0.1:9092")
       .option("topic", "clicks-copy")            # or a ``topic`` column
       .option("checkpointLocation", "/tmp/ck")
       .start())

Columns and options are Spark's Kafka sink's (:mod:`riverbed.spark.sink.config`). Unlike
that sink, which is at-least-once, every write task writes its rows in one Kafka transaction
together with its progress, so after any crash and restart from the checkpoint each row is in
the output once for ``read_committed`` readers (:mod:`riverbed.spark.sink.task` says how,
crash by crash). ``read_uncommitted`` readers also see the rows of aborted attempts.

Where things run:

- ``BatchWriter``/``StreamWriter.__init__``: on the driver, once per query plan and (for
  streams) again in every ``commit``/``abort`` worker; it checks the options and input
  columns and talks to nobody.
- ``write(batches)``: on an executor, once per task (partition) of every (micro-)batch, with
  the input as Arrow record batches; the writer object was pickled at planning time.
- ``commit``/``abort``: on the driver after all tasks of a batch (each call a short-lived
  worker with a new writer). Tasks commit their own transactions, so there is nothing left
  to commit or undo: ``commit`` logs what was written; ``abort`` (some task failed) logs
  which tasks had committed. Those stay written, and the batch's replay skips them.

A batch write (``df.write.format("riverbed").save()``) is atomic per task, not per job (as
Spark's Kafka sink: a failed job leaves the rows of its finished tasks); task retries within
the job still write exactly once, keyed by a random token per ``save()``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from riverbed.spark.errors import SinkOptionError
from riverbed.spark.sink.config import SinkPlan
from riverbed.spark.sink.task import TaskOutcome, TaskState, WriteTask, write_task

__all__ = ["BatchWriter", "SinkCommitMessage", "StreamWriter"]

log = logging.getLogger(__name__)

QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""Local property of a streaming query's tasks: the query's id, kept in the checkpoint's
``metadata`` file, so the same after a restart (``StreamExecution.QUERY_ID_KEY``)."""
BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""Local property of a micro-batch's tasks: its batch id (``MicroBatchExecution.BATCH_ID_KEY``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SinkCommitMessage(WriterCommitMessage):
    """What one task did, sent to the driver's ``commit``/``abort``."""

    outcome: TaskOutcome


def _task_context() -> TaskContext:
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("write() runs in a Spark task (TaskContext.get() is None)")
    return context


def _outcomes(messages: Sequence[WriterCommitMessage | None]) -> list[TaskOutcome]:
    return [m.outcome for m in messages if isinstance(m, SinkCommitMessage)]


def _summary(outcomes: Sequence[TaskOutcome]) -> str:
    def count(state: TaskState) -> int:
        return sum(1 for o in outcomes if o.state is state)

    rows = sum(o.rows for o in outcomes if o.state is TaskState.WRITTEN)
    return (
        f"{rows} rows written by {count(TaskState.WRITTEN)} tasks, "
        f"{count(TaskState.SKIPPED)} tasks already committed, {count(TaskState.EMPTY)} empty"
    )


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("riverbed")``: each task's rows in one transaction."""

    def __init__(
        self, options: dict[str, str], schema: StructType, *, overwrite: bool = False
    ) -> None:
        if overwrite:
            raise SinkOptionError(
                "Save mode Overwrite not allowed for riverbed (Kafka). "
                "Allowed save modes are Append and ErrorIfExists (default)."
            )
        self.plan = SinkPlan.build(options, schema)
        self.job = uuid.uuid4().hex
        """Unique per ``save()``: task retries share it, another job never does."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        task = WriteTask(job=self.job, partition=_task_context().partitionId(), batch_id=0)
        return SinkCommitMessage(outcome=write_task(self.plan, iterator, task))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("riverbed sink, job %s: %s", self.job, _summary(_outcomes(messages)))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning(
            "riverbed sink, job %s failed; tasks that had committed stay written: %s",
            self.job,
            _summary(_outcomes(messages)),
        )


class StreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("riverbed")``: exactly once across restarts from a checkpoint.

    ``overwrite`` (Complete output mode) appends the whole result every batch, as Spark's
    Kafka sink does."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.plan = SinkPlan.build(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        context = _task_context()
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
        if query_id is None or batch_id is None:
            raise RuntimeError(
                f"a streaming write task without {QUERY_ID_PROPERTY!r} or {BATCH_ID_PROPERTY!r}"
            )
        task = WriteTask(job=query_id, partition=context.partitionId(), batch_id=int(batch_id))
        return SinkCommitMessage(outcome=write_task(self.plan, iterator, task))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("riverbed sink, batch %d: %s", batchId, _summary(_outcomes(messages)))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning(
            "riverbed sink, batch %d failed; tasks that had committed stay written and its "
            "replay skips them: %s",
            batchId,
            _summary(_outcomes(messages)),
        )
