"""The ``search_ctr`` pipeline (DESIGN.md): searches joined with the clicks on them, and the
click-through rate per query and 1-minute window of the search.

Two stateful operators in one query:

1. :class:`SearchClicks` (an interval join, :mod:`riverbed.pipelines.intervals`), keyed by
   ``search_id`` over the union of ``searches`` and ``clicks``, event time with the
   2-minute watermark: a click counts for a search when ``0 <= click.ts - search.ts <= 10
   min``. It emits *deltas* per (window of the search, query): ``searches`` +1 when a search
   arrives, ``clicked`` +1 at its first matching click. A search waits in the state until
   the watermark passes ``ts + 10 min`` (no on-time click can match it after that); a
   click without its search waits until the watermark passes its ``ts`` (no on-time search
   can match it after that); either is dropped at most :data:`EXPIRY_RESOLUTION_MS` later.
2. :class:`RunningTotals`, keyed by (``window_start``, ``query``), no event time: adds the
   deltas and writes the window's current totals (``searches``, ``clicked_searches``,
   ``ctr``) to ``search_ctr``, once per micro-batch in which they changed. The topic is a
   changelog: the last value per key is the result, final once the watermark has passed
   the window's end plus 10 minutes.

Both group by a bucket of their key and keep each key's state in a map state of the bucket
(:mod:`riverbed.pipelines.buckets`): a search id has a record or two per micro-batch, and a
group per key made PySpark's fixed cost per group the bulk of the work.

Late data: a search that arrives after the watermark still counts as a search, with the
clicks still held for it; a click that arrives after its search expired is not counted
(nothing is left to join it with). Records without ``search_id`` or ``ts``, and searches
without ``query``, are left out. A second search with the same ``search_id`` while the
first is held is a duplicate and is ignored.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import LongType, StringType, StructField, StructType

from riverbed.pipelines.buckets import BUCKET, KeyedStates, bucket_of
from riverbed.pipelines.inputs import WATERMARK_DELAY
from riverbed.pipelines.intervals import IntervalJoin, IntervalJoinState, LeftRow, RightRow
from riverbed.pipelines.operators import OUTPUT_SCHEMA, dumps, with_event_time

__all__ = ["CLICK_WINDOW", "EXPIRY_RESOLUTION_MS", "RunningTotals", "SearchClicks", "build"]

MINUTE_MS = 60_000
CLICK_WINDOW = IntervalJoin(lower_ms=0, upper_ms=10 * MINUTE_MS)
EXPIRY_RESOLUTION_MS = 60_000
"""A search id's state is expired at most this much event time after its own expiry."""

EVENT = StructType(
    [
        StructField("search_id", StringType()),
        StructField("query", StringType()),
        StructField("ts", LongType()),
    ]
)
"""The fields of a search or a click (DESIGN.md) that the join uses; clicks have no query."""
DELTAS = StructType(
    [
        StructField("window_start", LongType(), False),
        StructField("query", StringType(), False),
        StructField("searches", LongType(), False),
        StructField("clicked", LongType(), False),
    ]
)


class SearchClicks(StatefulProcessor):
    """Stage 1 (module docstring): per ``search_id``, the search and its clicks, joined
    within :data:`CLICK_WINDOW`; emits (window_start, query, searches, clicked) deltas,
    summed per (window_start, query). Grouped by the bucket of the ``search_id``
    (:mod:`riverbed.pipelines.buckets`); each search id's state is an
    :class:`~riverbed.pipelines.intervals.IntervalJoinState`, handled again when its next
    expiry comes (to within :data:`EXPIRY_RESOLUTION_MS`)."""

    def __init__(self, *, window_ms: int = MINUTE_MS, condition: IntervalJoin = CLICK_WINDOW):
        self.window_ms, self.condition = window_ms, condition

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.states = KeyedStates(handle, "joins", resolution_ms=EXPIRY_RESOLUTION_MS)

    def _save(self, search_id: str, state: IntervalJoinState) -> None:
        if state.is_empty():
            self.states.remove(search_id)
        else:
            self.states.put(search_id, state.to_obj(), due_ms=state.next_expiry_ms(self.condition))

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        batch = pd.concat(list(rows), ignore_index=True).dropna(subset=["search_id", "ts"])
        by_id: dict[str, tuple[list[LeftRow], list[RightRow]]] = {}
        for search_id, kind, query, ts in zip(
            *(batch[c].tolist() for c in ("search_id", "kind", "query", "ts")), strict=True
        ):
            lefts, rights = by_id.setdefault(str(search_id), ([], []))
            if kind == "click":
                rights.append(RightRow(ts=int(ts), fields={}))
            elif isinstance(query, str):  # a search without a query is left out
                lefts.append(LeftRow(id=str(search_id), ts=int(ts), fields={"query": query}))
        watermark = timerValues.getCurrentWatermarkInMs()
        deltas: dict[tuple[int, str], list[int]] = {}
        for search_id, (lefts, rights) in by_id.items():
            stored = self.states.get(search_id)
            state = IntervalJoinState() if stored is None else IntervalJoinState.from_obj(stored)
            new, joined = state.add(self.condition, lefts=lefts, rights=rights)
            for left in new:
                deltas.setdefault(self._window(left), [0, 0])[0] += 1
            for pair in joined:
                if pair.first:
                    deltas.setdefault(self._window(pair.left), [0, 0])[1] += 1
            state.expire(self.condition, watermark)
            self._save(search_id, state)
        self.states.flush()
        if deltas:  # each frame yielded costs an Arrow batch to the JVM, even an empty one
            yield pd.DataFrame(
                [(start, query, n, clicked) for (start, query), (n, clicked) in deltas.items()],
                columns=["window_start", "query", "searches", "clicked"],
            )

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        watermark = max(timerValues.getCurrentWatermarkInMs(), expiredTimerInfo.getExpiryTimeInMs())
        for search_id, stored in self.states.due(watermark):
            state = IntervalJoinState.from_obj(stored)
            state.expire(self.condition, watermark)
            self._save(search_id, state)
        self.states.flush()
        yield from ()  # nothing to emit: an expired search was counted when it came

    def _window(self, left: LeftRow) -> tuple[int, str]:
        return (left.ts - left.ts % self.window_ms, str(left.fields["query"]))

    def close(self) -> None:
        pass


class RunningTotals(StatefulProcessor):
    """Stage 2 (module docstring): per (window_start, query), the sums of the deltas,
    written to ``topic`` whenever they change. Grouped by the bucket of (window_start,
    query); each one's totals are a state of the bucket, under its output key."""

    def __init__(self, *, topic: str = "search_ctr") -> None:
        self.topic = topic

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.totals = KeyedStates(handle, "totals")

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        batch = pd.concat(list(rows), ignore_index=True)
        sums = batch.groupby(["window_start", "query"], sort=True)[["searches", "clicked"]].sum()
        out = []
        for (start, query), searches, clicked in zip(
            sums.index.tolist(), sums["searches"].tolist(), sums["clicked"].tolist(), strict=True
        ):
            record_key = dumps({"window_start": int(start), "query": str(query)})
            before = self.totals.get(record_key) or (0, 0)
            searches, clicked = before[0] + int(searches), before[1] + int(clicked)
            self.totals.put(record_key, [searches, clicked])
            value = {
                "window_start": int(start),
                "query": str(query),
                "searches": searches,
                "clicked_searches": clicked,
                "ctr": clicked / searches if searches else 0.0,
            }
            out.append((self.topic, record_key, dumps(value)))
        self.totals.flush()
        if out:
            yield pd.DataFrame(out, columns=["topic", "key", "value"])

    def close(self) -> None:
        pass


def build(source: DataFrame) -> DataFrame:
    """``search_ctr`` from a source subscribed to ``searches`` and ``clicks``, read in one
    pass (two filtered branches of the source would read every record twice)."""
    search = F.col("topic") == F.lit("searches")
    parsed = source.select(
        search.alias("is_search"),
        F.from_json(F.col("value").cast("string"), EVENT).alias("e"),
    )
    events = parsed.select(
        F.col("e.search_id").alias("search_id"),
        F.when(F.col("is_search"), F.lit("search")).otherwise(F.lit("click")).alias("kind"),
        F.when(F.col("is_search"), F.col("e.query")).alias("query"),
        F.col("e.ts").alias("ts"),
    )
    deltas = (
        with_event_time(events, WATERMARK_DELAY)
        .withColumn(BUCKET, bucket_of("search_id"))
        .groupBy(BUCKET)
        .transformWithStateInPandas(SearchClicks(), DELTAS, "append", "EventTime")
    )
    return (
        deltas.withColumn(BUCKET, bucket_of("window_start", "query"))
        .groupBy(BUCKET)
        .transformWithStateInPandas(RunningTotals(), OUTPUT_SCHEMA, "append", "None")
    )
