"""What every riverbed operator does around its own work: the ``StatefulProcessor`` of
PySpark's ``transformWithStateInPandas``, once.

Spark calls a processor's ``handleInputRows`` once per grouping key (for most operators, a
hash bucket of the key: :mod:`riverbed.pipelines.operators.buckets`) and micro-batch with
input, and ``handleExpiredTimer`` once per timer the watermark has reached. Around the
operator's own work, each call does the same, here:

- ``handleInputRows``: the key's input frames as one pandas frame (``pd.concat``), the
  watermark, the operator's :meth:`Operator.on_input`, then :meth:`Operator.on_input_done`
  (a :class:`KeyedOperator` handles there the keys whose time has come, if the bucket's
  timer has: the slots the input read are still in the cache, so each is read and written
  once per batch, where the timer firing after the input read and wrote them again), the
  states written (:meth:`Operator.flush`), and the output rows as one frame;
- ``handleExpiredTimer``: :meth:`Operator.on_timer` (for a :class:`KeyedOperator`, the keys
  of the bucket whose time has come, :meth:`KeyedOperator.on_due` each), flush, output;
- the output frame is yielded **only when it has rows**: each frame yielded costs an
  Arrow batch to the JVM, even an empty one (py-spy showed 25-30% of a worker's time in
  empty frames).

The hooks return the output rows as tuples in the order of the operator's
``output_schema`` (:data:`OUTPUT_SCHEMA` for the operators that write to the riverbed
sink). The per-call cost of this layer is a method call or two, next to the 0.65 ms that
PySpark spends per group and batch. :func:`by_bucket` applies a :class:`KeyedOperator` to
a DataFrame.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import StringType, StructField, StructType

from riverbed.pipelines.operators.buckets import BUCKET, SLOTS, KeyedStates, bucket_of
from riverbed.spark.worker_gc import freeze_survivors

__all__ = [
    "GC_THRESHOLD",
    "OUTPUT_SCHEMA",
    "KeyedOperator",
    "Operator",
    "OutputRows",
    "by_bucket",
]

GC_THRESHOLD = 50_000
"""The allocations between two of CPython's young garbage collections in a Python worker that
runs an operator (:meth:`Operator.init`; CPython's default is 700). An operator parses its
keys' states from JSON, many small objects that live for one call, and each collection
scans what has survived so far: with the default, collections took about a tenth of
``fraud_alerts``' operator (``benchmarks/pattern_operator.py``, BENCHMARKS.md)."""

OUTPUT_SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("key", StringType(), False),
        StructField("value", StringType(), True),
    ]
)
"""Rows for the riverbed sink: the topic, the key's JSON, the value's JSON (null: a
tombstone)."""

OutputRows = list[tuple[Any, ...]]
"""An operator's output rows, each a tuple in the order of its ``output_schema``."""


class Operator(StatefulProcessor):
    """A stateful processor by its hooks (module docstring). Subclasses set up their states
    in ``init`` (calling this one's first) and implement :meth:`on_input`; those with
    timers :meth:`on_timer`.

    Spark pickles the processor to the executors; ``init`` runs there before the first key
    of a task (and once on the driver, to learn the state schema)."""

    def __init__(self, *, output_schema: StructType) -> None:
        self.output_schema = output_schema
        self._columns = [field.name for field in output_schema.fields]

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Before the first key of a task, in the Python worker: collect garbage less often
        there (:data:`GC_THRESHOLD`; PySpark reuses its workers, so this stays for the next
        tasks) and freeze what is alive
        (:func:`~riverbed.spark.worker_gc.freeze_survivors`). Subclasses that set up states
        call this first."""
        young, *older = gc.get_threshold()
        if young < GC_THRESHOLD:
            gc.set_threshold(GC_THRESHOLD, *older)
        freeze_survivors()

    def on_input(self, key: Any, batch: pd.DataFrame, watermark_ms: int) -> OutputRows:
        """One key's input rows of the micro-batch (the grouping key's values, all its rows
        in one frame, the watermark); the output rows."""
        raise NotImplementedError

    def on_input_done(self, key: Any, watermark_ms: int) -> OutputRows:
        """After :meth:`on_input`, before the states are written; the output rows (none
        here)."""
        return []

    def on_timer(self, key: Any, watermark_ms: int, expiry_ms: int) -> OutputRows:
        """A timer of the key at ``expiry_ms`` has fired (``expiry_ms <= watermark_ms``);
        the output rows. Only operators that register timers are called here."""
        raise NotImplementedError

    def flush(self) -> None:
        """After each call of a hook: write what the operator caches of its states."""

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        batch = pd.concat(list(rows), ignore_index=True)
        watermark = timerValues.getCurrentWatermarkInMs()
        out = self.on_input(key, batch, watermark)
        out += self.on_input_done(key, watermark)
        self.flush()
        if out:  # each frame yielded costs an Arrow batch to the JVM, even an empty one
            yield pd.DataFrame(out, columns=self._columns)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        watermark = timerValues.getCurrentWatermarkInMs()
        out = self.on_timer(key, watermark, expiredTimerInfo.getExpiryTimeInMs())
        self.flush()
        if out:
            yield pd.DataFrame(out, columns=self._columns)

    def close(self) -> None:
        """Nothing to release: the states are Spark's."""


class KeyedOperator(Operator):
    """An operator grouped by a bucket of its key, each key's state kept in
    :class:`~riverbed.pipelines.operators.buckets.KeyedStates` (``self.states``, map state
    ``state_name``; with ``resolution_ms``, timers per key; ``parsed``: its states hold no
    computed float). :meth:`flush` writes the states; a fired timer calls :meth:`on_due`
    for each key whose time has come."""

    def __init__(
        self,
        *,
        output_schema: StructType,
        state_name: str,
        resolution_ms: int | None = None,
        slots: int = SLOTS,
        parsed: bool = False,
    ) -> None:
        super().__init__(output_schema=output_schema)
        self._state_name, self._resolution_ms, self._slots = state_name, resolution_ms, slots
        self._parsed = parsed

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.states = KeyedStates(
            handle,
            self._state_name,
            resolution_ms=self._resolution_ms,
            slots=self._slots,
            parsed=self._parsed,
        )

    def on_due(self, name: str, state: Any, watermark_ms: int) -> OutputRows:
        """The key ``name`` is due (its listed time is at or below the watermark), with its
        ``state``: it must be put again or removed (:meth:`KeyedStates.due`); the output
        rows."""
        raise NotImplementedError

    def on_input_done(self, key: Any, watermark_ms: int) -> OutputRows:
        if self._resolution_ms is None:
            return []
        return self._handle_due(self.states.due_now(watermark_ms), watermark_ms)

    def on_timer(self, key: Any, watermark_ms: int, expiry_ms: int) -> OutputRows:
        return self._handle_due(self.states.due(watermark_ms), watermark_ms)

    def _handle_due(self, due: list[tuple[str, Any]], watermark_ms: int) -> OutputRows:
        out: OutputRows = []
        for name, state in due:
            out += self.on_due(name, state, watermark_ms)
        return out

    def flush(self) -> None:
        self.states.flush()


def by_bucket(
    rows: DataFrame, processor: KeyedOperator, *key: str | Column, time_mode: str
) -> DataFrame:
    """``processor`` applied to ``rows`` grouped by the bucket of the key made of the
    columns ``key`` (:func:`~riverbed.pipelines.operators.buckets.bucket_of`), in append
    mode with Spark's ``time_mode`` (``"EventTime"``, or ``"None"`` for an operator without
    timers); the rows of ``processor.output_schema``."""
    return (
        rows.withColumn(BUCKET, bucket_of(*key))
        .groupBy(BUCKET)
        .transformWithStateInPandas(processor, processor.output_schema, "append", time_mode)
    )
