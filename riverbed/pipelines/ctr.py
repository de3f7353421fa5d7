"""The ``search_ctr`` pipeline (DESIGN.md): searches joined with the clicks on them, and the
click-through rate per query and 1-minute window of the search.

Two stateful operators in one query:

1. :class:`SearchClicks` (an interval join, :mod:`riverbed.pipelines.intervals`), grouped by
   ``search_id`` over the union of ``searches`` and ``clicks``, event time with the
   2-minute watermark: a click counts for a search when ``0 <= click.ts - search.ts <= 10
   min``. It emits *deltas* per (window of the search, query): ``searches`` +1 when a search
   arrives, ``clicked`` +1 at its first matching click. A search waits in the state until
   the watermark passes ``ts + 10 min`` (no on-time click can match it after that); a
   click without its search waits until the watermark passes its ``ts`` (no on-time search
   can match it after that).
2. :class:`RunningTotals`, grouped by (``window_start``, ``query``), no event time: adds the
   deltas and writes the window's current totals (``searches``, ``clicked_searches``,
   ``ctr``) to ``search_ctr``, once per micro-batch in which they changed. The topic is a
   changelog: the last value per key is the result, final once the watermark has passed
   the window's end plus 10 minutes.

Late data: a search that arrives after the watermark still counts as a search, with the
clicks still held for it; a click that arrives after its search expired is not counted
(nothing is left to join it with). Records without ``search_id`` or ``ts``, and searches
without ``query``, are left out. A second search with the same ``search_id`` while the
first is held is a duplicate and is ignored.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
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

from riverbed.pipelines.inputs import WATERMARK_DELAY
from riverbed.pipelines.intervals import IntervalJoin, IntervalJoinState, LeftRow, RightRow
from riverbed.pipelines.operators import OUTPUT_SCHEMA, dumps, with_event_time

__all__ = ["CLICK_WINDOW", "RunningTotals", "SearchClicks", "build"]

MINUTE_MS = 60_000
CLICK_WINDOW = IntervalJoin(lower_ms=0, upper_ms=10 * MINUTE_MS)

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
_NO_DELTAS = pd.DataFrame(
    {
        "window_start": pd.Series(dtype="int64"),
        "query": pd.Series(dtype=str),
        "searches": pd.Series(dtype="int64"),
        "clicked": pd.Series(dtype="int64"),
    }
)


class SearchClicks(StatefulProcessor):
    """Stage 1 (module docstring): per ``search_id``, the search and its clicks, joined
    within :data:`CLICK_WINDOW`; emits (window_start, query, searches, clicked) deltas."""

    def __init__(self, *, window_ms: int = MINUTE_MS, condition: IntervalJoin = CLICK_WINDOW):
        self.window_ms, self.condition = window_ms, condition

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("join", "state STRING")
        self.timer = handle.getValueState("timer", "at LONG")

    def _load(self) -> IntervalJoinState:
        stored = self.state.get() if self.state.exists() else None
        return IntervalJoinState() if stored is None else IntervalJoinState.from_json(stored[0])

    def _save(self, state: IntervalJoinState, watermark_ms: int) -> None:
        """Store ``state`` and keep one timer, at its next expiry."""
        due = state.next_expiry_ms(self.condition)
        timer = self.timer.get() if self.timer.exists() else None
        old = None if timer is None else int(timer[0])
        if old is not None and old != due:
            self.handle.deleteTimer(old)
        if state.is_empty():
            self.state.clear()
            self.timer.clear()
            return
        self.state.update((state.to_json(),))
        if due is not None and due != old:
            self.handle.registerTimer(due)
            self.timer.update((due,))

    def _delta(self, left: LeftRow, searches: int, clicked: int) -> tuple[int, str, int, int]:
        start = left.ts - left.ts % self.window_ms
        return (start, str(left.fields["query"]), searches, clicked)

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        batch = pd.concat(list(rows), ignore_index=True).dropna(subset=["ts"])
        if key[0] is None:
            yield _NO_DELTAS  # clicks and searches without a search_id join nothing
            return
        searches = batch[(batch["kind"] == "search") & batch["query"].notna()]
        clicks = batch[batch["kind"] == "click"]
        search_id = str(key[0])
        state = self._load()
        new, joined = state.add(
            self.condition,
            lefts=[
                LeftRow(id=search_id, ts=int(ts), fields={"query": str(q)})
                for ts, q in zip(searches["ts"], searches["query"], strict=True)
            ],
            rights=[RightRow(ts=int(ts), fields={}) for ts in clicks["ts"]],
        )
        deltas = [self._delta(left, 1, 0) for left in new]
        deltas += [self._delta(pair.left, 0, 1) for pair in joined if pair.first]
        watermark = timerValues.getCurrentWatermarkInMs()
        state.expire(self.condition, watermark)
        self._save(state, watermark)
        yield _deltas(deltas)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        self.timer.clear()  # this timer has fired
        state = self._load()
        watermark = timerValues.getCurrentWatermarkInMs()
        state.expire(self.condition, max(watermark, expiredTimerInfo.getExpiryTimeInMs()))
        self._save(state, watermark)
        yield _NO_DELTAS

    def close(self) -> None:
        pass


def _deltas(rows: Sequence[tuple[int, str, int, int]]) -> pd.DataFrame:
    if not rows:
        return _NO_DELTAS
    return pd.DataFrame(rows, columns=["window_start", "query", "searches", "clicked"])


class RunningTotals(StatefulProcessor):
    """Stage 2 (module docstring): per (window_start, query), the sums of the deltas,
    written to ``topic`` whenever they change."""

    def __init__(self, *, topic: str = "search_ctr") -> None:
        self.topic = topic

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.totals = handle.getValueState("totals", "searches LONG, clicked LONG")

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        batch = pd.concat(list(rows), ignore_index=True)
        stored = self.totals.get() if self.totals.exists() else None
        searches, clicked = (0, 0) if stored is None else stored
        searches, clicked = (
            int(searches) + int(batch["searches"].sum()),
            int(clicked) + int(batch["clicked"].sum()),
        )
        self.totals.update((searches, clicked))
        start, query = int(key[0]), str(key[1])
        value = {
            "window_start": start,
            "query": query,
            "searches": searches,
            "clicked_searches": clicked,
            "ctr": clicked / searches if searches else 0.0,
        }
        yield pd.DataFrame(
            [(self.topic, dumps({"window_start": start, "query": query}), dumps(value))],
            columns=["topic", "key", "value"],
        )

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
        .groupBy("search_id")
        .transformWithStateInPandas(SearchClicks(), DELTAS, "append", "EventTime")
    )
    return deltas.groupBy("window_start", "query").transformWithStateInPandas(
        RunningTotals(), OUTPUT_SCHEMA, "append", "None"
    )
