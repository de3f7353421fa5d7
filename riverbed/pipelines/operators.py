"""Reusable windowed operators on Spark's stateful streaming (``transformWithStateInPandas``).

Each operator takes a DataFrame of events (JSON already parsed, an integer ``ts`` column in
epoch ms) and returns rows ready for the riverbed sink: ``topic``, ``key`` and ``value``
(JSON strings), so that a pipeline's results and its side outputs are written together,
in the same transactions, exactly once.

**Watermarks, and why the event-time column is dropped.** :func:`with_event_time` declares
the watermark on a timestamp column and then drops that column again. Spark still computes
the watermark (the maximum event time seen in earlier micro-batches minus the delay) and
hands it to the operator, but with the watermarked column in its input a stateful operator
silently discards the rows older than the watermark before user code sees them. Without it
the operator sees every row and decides itself (:mod:`riverbed.pipelines.windows`): rows for
windows still open are counted, late rows go to a side output with the reason.

**Partial aggregation before the shuffle.** As Spark's own aggregations do, the windowed
counts are first counted where the events are read: :func:`count_panes` turns each Arrow
batch (``mapInArrow``) into one row per grouping key and pane (the slide-aligned interval
whose events all belong to the same windows) with its count and, for the late side output,
the pane's events as one Arrow IPC stream, opened only if the pane turns out late. The
stateful operator then sees a few rows per key instead of every event.

The operators keep their state in Spark's state store (RocksDB, checkpointed), one state per
grouping key, and emit a window or a session once, when the watermark completes it (timers
at the window's end or the session's end plus the gap).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from riverbed.pipelines.windows import (
    Session,
    closed_sessions,
    counts_by_window,
    late_reason,
    merge_sessions,
    pane_start,
)

__all__ = [
    "NO_OUTPUT",
    "OUTPUT_SCHEMA",
    "SessionWindows",
    "WindowedCounts",
    "count_panes",
    "output_rows",
    "sessions",
    "windowed_counts",
    "with_event_time",
]

OUTPUT_SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("key", StringType(), False),
        StructField("value", StringType(), True),
    ]
)
NO_OUTPUT = pd.DataFrame(
    {"topic": pd.Series(dtype=str), "key": pd.Series(dtype=str), "value": pd.Series(dtype=str)}
)


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def with_event_time(events: DataFrame, delay: str, ts_column: str = "ts") -> DataFrame:
    """Declare the watermark (``delay`` behind the latest event time) on ``ts_column`` (epoch
    ms), keeping the column a plain integer (module docstring)."""
    return (
        events.withColumn("_event_time", F.timestamp_millis(F.col(ts_column)))
        .withWatermark("_event_time", delay)
        .drop("_event_time")
    )


def output_rows(rows: Sequence[tuple[str, str, str | None]]) -> pd.DataFrame:
    """(topic, key, value) rows as a stateful processor's output (:data:`OUTPUT_SCHEMA`)."""
    if not rows:
        return NO_OUTPUT
    return pd.DataFrame(rows, columns=["topic", "key", "value"])


PANE_START, PANE_EVENTS, PANE_ROWS = "pane_start", "pane_events", "pane_rows"


def count_panes(
    batch: pa.RecordBatch,
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
    table = pa.Table.from_batches([batch])
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


def _pane_batches(batches: Iterator[pa.RecordBatch], **panes: Any) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        counted = count_panes(batch, **panes)
        if counted.num_rows:
            yield counted


class WindowedCounts(StatefulProcessor):
    """Counts per grouping key and event-time window (tumbling or hopping), emitted once per
    window when the watermark reaches its end; late events go to ``late_topic``. Its input
    is :func:`count_panes`'s rows (:func:`windowed_counts` puts them in between)."""

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
        self.key_fields = list(key_fields)
        self.size_ms, self.slide_ms = size_ms, slide_ms
        self.topic, self.count_field = topic, count_field
        self.late_topic, self.late_key_field = late_topic, late_key_field
        self.event_fields = list(event_fields)

    def pane_counter(self) -> Any:
        """The ``mapInArrow`` function that counts events per key and pane."""
        late = self.late_topic is not None
        return functools.partial(
            _pane_batches,
            key_fields=self.key_fields,
            slide_ms=self.slide_ms,
            required=[*self.key_fields, "ts", *([self.late_key_field] if late else [])],
            event_fields=self.event_fields if late else [],
        )

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.counts = handle.getMapState("counts", "window_start LONG", "count LONG")

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        batch = pd.concat(list(rows), ignore_index=True)
        watermark = timerValues.getCurrentWatermarkInMs()
        counts, late_rows, late_starts = counts_by_window(
            batch[PANE_START].to_numpy(dtype=np.int64),
            self.size_ms,
            self.slide_ms,
            watermark,
            batch[PANE_EVENTS].to_numpy(dtype=np.int64),
        )
        for start, added in counts.items():
            stored = self.counts.getValue((start,)) if self.counts.containsKey((start,)) else None
            if stored is None:
                self.handle.registerTimer(start + self.size_ms)
            before = 0 if stored is None else int(stored[0])
            self.counts.updateValue((start,), (before + added,))
        out: list[tuple[str, str, str | None]] = []
        if self.late_topic is not None:
            for row, start in zip(late_rows.tolist(), late_starts.tolist(), strict=True):
                reason = late_reason(start, start + self.size_ms, watermark)
                with pa.ipc.open_stream(batch.at[row, PANE_ROWS]) as reader:
                    events = reader.read_all().to_pylist()
                for event in events:
                    event["reason"] = reason
                    out.append(
                        (
                            self.late_topic,
                            dumps({self.late_key_field: event[self.late_key_field]}),
                            dumps(event),
                        )
                    )
        yield output_rows(out)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        end = expiredTimerInfo.getExpiryTimeInMs()
        start = end - self.size_ms
        stored = self.counts.getValue((start,)) if self.counts.containsKey((start,)) else None
        if stored is None:
            yield NO_OUTPUT
            return
        count = int(stored[0])
        self.counts.removeKey((start,))
        group = dict(zip(self.key_fields, (_plain(k) for k in key), strict=True))
        result_key = {"window_start": start, **group}
        value = {"window_start": start, "window_end": end, **group, self.count_field: int(count)}
        yield output_rows([(self.topic, dumps(result_key), dumps(value))])

    def close(self) -> None:
        pass


class SessionWindows(StatefulProcessor):
    """Sessions per user: emitted once the watermark passes ``session_end + gap``; events
    older than the watermark are dropped (they could belong to a session already emitted)."""

    def __init__(self, *, user_field: str, gap_ms: int, topic: str, count_field: str) -> None:
        self.user_field, self.gap_ms = user_field, gap_ms
        self.topic, self.count_field = topic, count_field

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getMapState("sessions", "start LONG", "end LONG, events LONG")

    def _load(self) -> list[Session]:
        if not self.state.exists():
            return []
        return [Session(int(k[0]), int(v[0]), int(v[1])) for k, v in self.state.iterator()]

    def _save(self, before: list[Session], after: list[Session]) -> None:
        for session in before:
            self.state.removeKey((session.start,))
            self.handle.deleteTimer(session.end + self.gap_ms)
        for session in after:
            self.state.updateValue((session.start,), (session.end, session.events))
            self.handle.registerTimer(session.end + self.gap_ms)

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        if key[0] is None:
            yield NO_OUTPUT  # page views without a user have no session
            return
        watermark = timerValues.getCurrentWatermarkInMs()
        ts = np.concatenate([df["ts"].dropna().to_numpy(dtype=np.int64) for df in rows])
        on_time = ts[ts >= watermark].tolist()
        if on_time:
            before = self._load()
            self._save(before, merge_sessions(before, on_time, self.gap_ms))
        yield NO_OUTPUT

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        closed, _ = closed_sessions(self._load(), expiredTimerInfo.getExpiryTimeInMs(), self.gap_ms)
        out: list[tuple[str, str, str | None]] = []
        user = _plain(key[0])
        for session in closed:
            self.state.removeKey((session.start,))
            result_key = {self.user_field: user, "session_start": session.start}
            value = {
                self.user_field: user,
                "session_start": session.start,
                "session_end": session.end,
                self.count_field: session.events,
            }
            out.append((self.topic, dumps(result_key), dumps(value)))
        yield output_rows(out)

    def close(self) -> None:
        pass


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value JSON can encode."""
    return value.item() if isinstance(value, np.generic) else value


def windowed_counts(events: DataFrame, processor: WindowedCounts) -> DataFrame:
    """Apply :class:`WindowedCounts` (events need a watermark: :func:`with_event_time`),
    counting per pane before the shuffle (module docstring)."""
    pane_schema = StructType(
        [
            *(events.schema[name] for name in processor.key_fields),
            StructField(PANE_START, LongType(), False),
            StructField(PANE_EVENTS, LongType(), False),
            StructField(PANE_ROWS, BinaryType(), False),
        ]
    )
    panes = events.mapInArrow(processor.pane_counter(), pane_schema)
    return panes.groupBy(*processor.key_fields).transformWithStateInPandas(
        processor, OUTPUT_SCHEMA, "append", "EventTime"
    )


def sessions(events: DataFrame, processor: SessionWindows) -> DataFrame:
    """Apply :class:`SessionWindows` (events need a watermark: :func:`with_event_time`)."""
    return events.groupBy(processor.user_field).transformWithStateInPandas(
        processor, OUTPUT_SCHEMA, "append", "EventTime"
    )
