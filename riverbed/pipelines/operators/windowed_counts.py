"""Counts per key and event-time window (tumbling or hopping), with the late side output:
:class:`WindowedCounts` on Spark's stateful streaming (``transformWithStateInPandas``,
EventTime mode), applied by :func:`windowed_counts`; the window logic is
:mod:`riverbed.pipelines.operators.windows`.

The operator takes a DataFrame of events (JSON already parsed, an integer ``ts`` column in
epoch ms) and the watermark's delay, or with :func:`windowed_json_counts` a topic's
records, parsed in its first step, and
returns rows ready for the riverbed sink (``topic``, ``key``, ``value``: JSON strings),
so that the results and the late side output are written together, in the same
transactions, exactly once. Rows for windows still open are counted; a late row (its
window already complete) goes to the side output with the reason.

**Partial aggregation before the shuffle.** As Spark's own aggregations do, the events are
first counted where they are read: :func:`count_panes` turns each Arrow batch
(``mapInArrow``) into one row per grouping key and pane (the slide-aligned interval whose
events all belong to the same windows) with its count and, for the late side output, the
pane's events as one Arrow IPC stream, opened only if the pane turns out late. The
stateful operator then sees a few rows per key instead of every event.

**State**, per grouping key (Spark's state store, RocksDB, checkpointed): one value state,
``windows``, the JSON of the key's open windows (start -> count) and the timers registered
for it; the key has a timer at its earliest window's end, when every window the watermark
has passed is emitted, once, and the timer moves to the next. Every state access is a
round trip to the JVM: with a map entry and a timer per window, a window cost about three
when opened (a lookup, a read or a timer, a write) and three when closed; in the
benchmark's 250,000-record batches, about four windows a key open and four close, about
25 accesses a key and batch. Now a batch's input reads and writes the key's value once and
its one timer reads and writes it once and registers the next: about 5
(BENCHMARKS.md). A checkpoint written before 2026-11-28 kept the map state ``counts``:
a key with no ``windows`` value moves its windows from there (its timers, one a window,
are still registered and fire as before), at the cost of one more access for a key
whose windows have all been written.

**A window is written in the micro-batch whose events pass its end**, not in the next one.
Spark computes the watermark at the end of a micro-batch (the greatest event time of the
batch less the delay, if greater than the last) and hands it to the operator in the next,
so a timer at a window's end fires one micro-batch after the event that moved the
watermark past it: at a 500 ms trigger, about a second later (BENCHMARKS.md). Each pane
row carries ``batch_max_ts``, the greatest event time of its input batch, so a key's rows
give a lower bound of the watermark the batch will set; the key's windows ending at or
below it are written with its input. That changes no result: in the next micro-batch the
watermark is at least that bound, so anything for those windows is late there as it would
have been anyway, and no row of the key in this batch is left out (all of them come in one
call). The timers of the windows written so are deleted; a key without input in the batch
keeps its timer, which writes its windows one micro-batch later, as before.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle
from pyspark.sql.types import BinaryType, LongType, StructField, StructType

from riverbed.pipelines.operators.base import OUTPUT_SCHEMA, Operator, OutputRows
from riverbed.pipelines.operators.inputs import delay_ms, of_topic, with_event_time
from riverbed.pipelines.operators.json_arrow import fields_of, parse_json_objects
from riverbed.pipelines.operators.json_rows import dumps, plain, read_state, state_text
from riverbed.pipelines.operators.windows import counts_by_window, late_reason, pane_start
from riverbed.spark.worker_gc import freeze_survivors

__all__ = [
    "WindowedCounts",
    "count_panes",
    "json_panes",
    "panes",
    "windowed_counts",
    "windowed_json_counts",
]

PANE_START, PANE_EVENTS, PANE_ROWS = "pane_start", "pane_events", "pane_rows"
BATCH_MAX_TS = "batch_max_ts"


def count_panes(
    batch: pa.RecordBatch | pa.Table,
    *,
    key_fields: Sequence[str],
    slide_ms: int,
    required: Sequence[str],
    event_fields: Sequence[str],
) -> pa.RecordBatch:
    """A batch of events (``ts`` in epoch ms) counted per grouping key and pane: one row per
    (key, pane) with the key fields, ``pane_start``, ``pane_events`` (the count) and
    ``pane_rows``, the pane's ``event_fields`` as an Arrow IPC stream (empty when
    ``event_fields`` is). Events without one of the ``required`` fields are left out."""
    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    valid = np.ones(table.num_rows, dtype=bool)
    for name in required:
        valid &= table[name].is_valid().to_numpy(zero_copy_only=False)
    table = table.filter(pa.array(valid))
    panes = pane_start(table["ts"].to_numpy().astype(np.int64), slide_ms)
    grouping = [*key_fields, PANE_START]
    table = (
        table.append_column(PANE_START, pa.array(panes, pa.int64()))
        .sort_by([(name, "ascending") for name in grouping])
        .combine_chunks()
    )
    rows = table.num_rows
    first = np.ones(rows, dtype=bool)
    if rows > 1:
        first[1:] = False
        for name in grouping:
            column = table[name]
            changed = pc.not_equal(column.slice(1), column.slice(0, rows - 1))
            first[1:] |= changed.to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(first)
    ends = np.append(starts[1:], rows)[: len(starts)]
    events = table.select(list(event_fields))
    bounds = zip(starts.tolist(), ends.tolist(), strict=True)
    blobs = [_ipc(events.slice(a, b - a)) if event_fields else b"" for a, b in bounds]
    heads = table.take(pa.array(starts, pa.int64()))
    return pa.RecordBatch.from_arrays(
        [
            *(heads[name].combine_chunks() for name in grouping),
            pa.array(ends - starts, pa.int64()),
            pa.array(blobs, pa.binary()),
        ],
        names=[*grouping, PANE_EVENTS, PANE_ROWS],
    )


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _pane_batches(
    batches: Iterator[pa.RecordBatch], *, schema: pa.Schema | None = None, **panes: Any
) -> Iterator[pa.RecordBatch]:
    """:func:`count_panes` of each batch of events, or with ``schema`` of records' values
    parsed as JSON objects, each output row with ``batch_max_ts``, the greatest ``ts`` of
    its input batch, for the watermark; an input batch with event times but no pane gives
    one row of null keys and no events."""
    freeze_survivors()
    for batch in batches:
        events = batch if schema is None else parse_json_objects(batch.column("value"), schema)
        top = pc.max(events["ts"]).as_py() if events.num_rows else None
        if top is None:
            continue
        counted = count_panes(events, **panes)
        if not counted.num_rows:
            counted = pa.RecordBatch.from_pylist(
                [{PANE_START: 0, PANE_EVENTS: 0, PANE_ROWS: b""}], schema=counted.schema
            )
        yield counted.append_column(BATCH_MAX_TS, pa.array([top] * counted.num_rows, pa.int64()))


class WindowedCounts(Operator):
    """Counts per grouping key and event-time window (tumbling or hopping), emitted once per
    window when the watermark reaches its end (or, with input, when the micro-batch that
    moves it there does: module docstring); late events go to ``late_topic`` (None: no
    side output), keyed by ``late_key_field``. Its input is :func:`count_panes`'s rows
    (:func:`windowed_counts` puts them in between); the result is keyed ``window_start`` and
    the key fields, its value the window, the key fields and ``count_field``."""

    def __init__(
        self,
        *,
        key_fields: Sequence[str],
        size_ms: int,
        slide_ms: int,
        topic: str,
        count_field: str,
        late_topic: str | None,
        late_key_field: str,
        event_fields: Sequence[str],
    ) -> None:
        super().__init__(output_schema=OUTPUT_SCHEMA)
        self.key_fields = list(key_fields)
        self.size_ms, self.slide_ms = size_ms, slide_ms
        self.topic, self.count_field = topic, count_field
        self.late_topic, self.late_key_field = late_topic, late_key_field
        self.event_fields = list(event_fields)
        self.delay_ms: int | None = None
        """The watermark's delay, set by :func:`windowed_counts` and
        :func:`windowed_json_counts` (None: windows are written only by their timers)."""

    def pane_counter(self, json_schema: pa.Schema | None = None) -> Any:
        """The ``mapInArrow`` function that counts events per key and pane; with
        ``json_schema``, of records' values, parsed first (:func:`windowed_json_counts`)."""
        late = self.late_topic is not None
        return functools.partial(
            _pane_batches,
            schema=json_schema,
            key_fields=self.key_fields,
            slide_ms=self.slide_ms,
            required=[*self.key_fields, "ts", *([self.late_key_field] if late else [])],
            event_fields=self.event_fields if late else [],
        )

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.handle = handle
        self.windows = handle.getValueState("windows", "windows STRING")
        self.legacy = handle.getMapState("counts", "window_start LONG", "count LONG")
        """The windows of a checkpoint written before ``windows`` (module docstring)."""

    def _load(self) -> tuple[dict[int, int], set[int]]:
        """The key's open windows (start -> count) and the timers registered for it."""
        stored = self.windows.get()
        if stored is None:
            return self._moved()
        state = read_state(stored[0])
        return {int(k): v for k, v in state["counts"].items()}, set(state["timers"])

    def _moved(self) -> tuple[dict[int, int], set[int]]:
        """A key without ``windows``: its windows in the map state of an older checkpoint
        (each with its own timer, still registered), removed from there to be stored in
        ``windows``; none for a key written since."""
        if not self.legacy.exists():
            return {}, set()
        counts = {int(start): int(count) for (start,), (count,) in self.legacy.iterator()}
        self.legacy.clear()
        timers = {start + self.size_ms for start in counts}
        self._store(counts, timers)
        return counts, timers

    def _store(self, counts: dict[int, int], timers: set[int]) -> None:
        """Write the key's state, first registering the timer of its earliest window's end
        if there is none yet: one timer a key, however many windows are open."""
        if not counts:
            self.windows.clear()
            return
        end = min(counts) + self.size_ms
        if end not in timers:
            self.handle.registerTimer(end)
            timers.add(end)
        state = {"counts": {str(k): v for k, v in counts.items()}, "timers": sorted(timers)}
        self.windows.update((state_text(state),))

    def on_input(self, key: Any, batch: pd.DataFrame, watermark_ms: int) -> OutputRows:
        if not batch[PANE_EVENTS].any():
            return []  # only rows that carried event times to the watermark
        added, late_rows, late_starts = counts_by_window(
            batch[PANE_START].to_numpy(dtype=np.int64),
            self.size_ms,
            self.slide_ms,
            watermark_ms,
            batch[PANE_EVENTS].to_numpy(dtype=np.int64),
        )
        out: OutputRows = []
        if added:
            counts, timers = self._load()
            for start, count in added.items():
                counts[start] = counts.get(start, 0) + int(count)
            next_ms = self._next_watermark(batch, watermark_ms)
            out += self._written(key, counts, next_ms)
            # the timers at or below the watermark fire in this batch; those up to the
            # next one would find their windows written
            for at in [at for at in timers if watermark_ms < at <= next_ms]:
                self.handle.deleteTimer(at)
            self._store(counts, {at for at in timers if at > next_ms})
        if self.late_topic is not None:
            for row, start in zip(late_rows.tolist(), late_starts.tolist(), strict=True):
                reason = late_reason(start, start + self.size_ms, watermark_ms)
                with pa.ipc.open_stream(batch.at[row, PANE_ROWS]) as reader:
                    events = reader.read_all().to_pylist()
                for event in events:
                    event["reason"] = reason
                    late_key = {self.late_key_field: event[self.late_key_field]}
                    out.append((self.late_topic, dumps(late_key), dumps(event)))
        return out

    def _next_watermark(self, batch: pd.DataFrame, watermark_ms: int) -> int:
        """The watermark that this micro-batch's end sets, or less: Spark's is the greatest
        event time of the whole batch less the delay, and ``batch_max_ts`` is each input
        batch's greatest (module docstring)."""
        if self.delay_ms is None:
            return watermark_ms
        return max(watermark_ms, int(batch[BATCH_MAX_TS].max()) - self.delay_ms)

    def _written(self, key: Any, counts: dict[int, int], until_ms: int) -> OutputRows:
        """The key's windows that end at or before ``until_ms``, as result rows, removed
        from ``counts``."""
        due = sorted(start for start in counts if start + self.size_ms <= until_ms)
        if not due:
            return []
        group = dict(zip(self.key_fields, (plain(k) for k in key), strict=True))
        out: OutputRows = []
        for start in due:
            end = start + self.size_ms
            result_key = {"window_start": start, **group}
            value = {"window_start": start, "window_end": end, **group}
            value[self.count_field] = counts.pop(start)
            out.append((self.topic, dumps(result_key), dumps(value)))
        return out

    def on_timer(self, key: Any, watermark_ms: int, expiry_ms: int) -> OutputRows:
        """Every window of the key that the watermark has passed, written and forgotten
        (another timer of the key due in the same batch then finds nothing)."""
        counts, timers = self._load()
        out = self._written(key, counts, watermark_ms)
        if out:
            # the timers at or below the watermark have fired, or fire in this batch
            self._store(counts, {at for at in timers if at > watermark_ms})
        return out


def _pane_schema(events: StructType, processor: WindowedCounts) -> StructType:
    return StructType(
        [
            *(events[name] for name in processor.key_fields),
            StructField(PANE_START, LongType(), False),
            StructField(PANE_EVENTS, LongType(), False),
            StructField(PANE_ROWS, BinaryType(), False),
            StructField(BATCH_MAX_TS, LongType(), False),
        ]
    )


def panes(events: DataFrame, delay: str, processor: WindowedCounts) -> DataFrame:
    """The events counted per grouping key and pane where they are read, before the shuffle
    (:func:`count_panes` in a ``mapInArrow``), with the watermark (``delay``) declared on
    each input batch's greatest ``ts``, which each pane row carries (``batch_max_ts``): the
    same watermark as on the events' ``ts``. :class:`WindowedCounts`' input. (Spark's
    progress reports then give that column's minimum and average as the events'
    ``eventTime``.)"""
    counted = events.mapInArrow(processor.pane_counter(), _pane_schema(events.schema, processor))
    return with_event_time(counted, delay, BATCH_MAX_TS)


def windowed_counts(events: DataFrame, delay: str, processor: WindowedCounts) -> DataFrame:
    """Apply :class:`WindowedCounts` to ``events`` (an integer ``ts`` column in epoch ms),
    with a watermark ``delay`` behind the latest event time (a Spark interval such as
    ``"2 minutes"``), counting per pane before the shuffle (module docstring)."""
    return _by_key(panes(events, delay, processor), delay, processor)


def json_panes(
    source: DataFrame, topic: str, schema: StructType, delay: str, processor: WindowedCounts
) -> DataFrame:
    """:func:`panes` of ``topic``'s events parsed with ``schema`` in the pane step itself
    (:mod:`~riverbed.pipelines.operators.json_arrow`, ``from_json``'s rules) rather than by
    ``from_json`` in the JVM."""
    arrow = to_arrow_schema(schema)
    fields_of(arrow)  # an unsupported field type fails here, not in the workers
    counter = processor.pane_counter(arrow)
    counted = (
        of_topic(source, topic).select("value").mapInArrow(counter, _pane_schema(schema, processor))
    )
    return with_event_time(counted, delay, BATCH_MAX_TS)


def windowed_json_counts(
    source: DataFrame, topic: str, schema: StructType, delay: str, processor: WindowedCounts
) -> DataFrame:
    """:func:`windowed_counts` of ``json_events(source, topic, schema)``, the same rows,
    with the JSON parsed in the pane step (:func:`json_panes`): faster, as the parse in the
    JVM and the events' trip to Python cost more (BENCHMARKS.md)."""
    return _by_key(json_panes(source, topic, schema, delay, processor), delay, processor)


def _by_key(counted: DataFrame, delay: str, processor: WindowedCounts) -> DataFrame:
    applied = copy.copy(processor)
    applied.delay_ms = delay_ms(delay)
    return counted.groupBy(*processor.key_fields).transformWithStateInPandas(
        applied, processor.output_schema, "append", "EventTime"
    )
