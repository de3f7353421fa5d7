"""The ``search_ctr`` pipeline (DESIGN.md): searches joined with the clicks on them, and the
click-through rate per query and 1-minute window of the search.

Two stateful operators in one query:

1. An interval join (:class:`~riverbed.pipelines.operators.interval_join.IntervalJoin`),
   keyed by ``search_id`` over the union of ``searches`` (the left side) and ``clicks`` (the
   right side), event time with the 2-minute watermark: a click counts for a search when
   ``0 <= click.ts - search.ts <= 10 min`` (:data:`CLICK_WINDOW`). It emits *deltas* per
   (window of the search, query): ``searches`` +1 when a search arrives (:func:`searched`),
   ``clicked`` +1 at its first matching click (:func:`clicked`), summed per
   (window, query) within each bucket's call (:func:`summed`). A search waits in the
   state until the watermark passes ``ts + 10 min`` (no on-time click can match it after
   that); a click without its search waits until the watermark passes its ``ts`` (no
   on-time search can match it after that); either is dropped at most a minute later.
2. :class:`RunningTotals`, keyed by (``window_start``, ``query``), no event time: adds the
   deltas and writes the window's current totals (``searches``, ``clicked_searches``,
   ``ctr``) to ``search_ctr``, once per micro-batch in which they changed. The topic is a
   changelog: the last value per key is the result, final once the watermark has passed
   the window's end plus 10 minutes.

Both group by a bucket of their key and keep each key's state in a map state of the bucket
(:mod:`riverbed.pipelines.operators.buckets`): a search id has a record or two per
micro-batch, and a group per key made PySpark's fixed cost per group the bulk of the work.

Late data: a search that arrives after the watermark still counts as a search, with the
clicks still held for it; a click that arrives after its search expired is not counted
(nothing is left to join it with). Records without ``search_id`` or ``ts``, and searches
without ``query``, are left out. A second search with the same ``search_id`` while the
first is held is a duplicate and is ignored.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from riverbed.pipelines.operators.base import OUTPUT_SCHEMA, KeyedOperator, OutputRows, by_bucket
from riverbed.pipelines.operators.inputs import with_event_time
from riverbed.pipelines.operators.interval_join import (
    LEFT,
    RIGHT,
    SIDE,
    IntervalJoin,
    interval_join,
)
from riverbed.pipelines.operators.intervals import Joined, JoinInterval, LeftRow
from riverbed.pipelines.operators.json_rows import dumps
from riverbed.pipelines.shop.contract import MINUTE_MS, SEARCH, WATERMARK_DELAY

__all__ = [
    "CLICK_WINDOW",
    "RunningTotals",
    "build",
    "clicked",
    "search_clicks",
    "searched",
    "summed",
]

CLICK_WINDOW = JoinInterval(lower_ms=0, upper_ms=10 * MINUTE_MS)
"""DESIGN.md: "a click counts for a search when ``0 <= click.ts - search.ts <= 10 min``"."""

JOIN_FIELDS = StructType([SEARCH["search_id"], SEARCH["query"], SEARCH["ts"]])
"""The fields of a search or a click that the join uses; clicks have no query."""
DELTAS = StructType(
    [
        StructField("window_start", LongType(), False),
        StructField("query", StringType(), False),
        StructField("searches", LongType(), False),
        StructField("clicked", LongType(), False),
    ]
)


def _window(search: LeftRow) -> tuple[int, str]:
    return search.ts - search.ts % MINUTE_MS, str(search.fields["query"])


def searched(search: LeftRow) -> list[tuple[int, str, int, int]]:
    """A new search: +1 search in its window and query."""
    return [(*_window(search), 1, 0)]


def clicked(pair: Joined) -> list[tuple[int, str, int, int]]:
    """A search joined with a click: +1 clicked search, at its first click only."""
    return [(*_window(pair.left), 0, 1)] if pair.first else []


def summed(deltas: list[tuple[int, str, int, int]]) -> list[tuple[int, str, int, int]]:
    """The deltas of one call of the join, summed per (window_start, query): the totals
    add them up anyway, and a third as many rows cross to the next stage."""
    sums: dict[tuple[int, str], list[int]] = {}
    for start, query, new_searches, new_clicked in deltas:
        both = sums.get((start, query))
        if both is None:
            sums[start, query] = [new_searches, new_clicked]
        else:
            both[0] += new_searches
            both[1] += new_clicked
    return [(start, query, n, c) for (start, query), (n, c) in sums.items()]


def search_clicks() -> IntervalJoin:
    """Stage 1 (module docstring): per ``search_id``, the search and its clicks, joined
    within :data:`CLICK_WINDOW`; emits (window_start, query, searches, clicked) deltas."""
    return IntervalJoin(
        condition=CLICK_WINDOW,
        key_field="search_id",
        left_id_field="search_id",
        left_fields=["query"],
        on_left=searched,
        on_join=clicked,
        output_schema=DELTAS,
        combine=summed,
    )


class RunningTotals(KeyedOperator):
    """Stage 2 (module docstring): per (window_start, query), the sums of the deltas,
    written to ``topic`` whenever they change. Grouped by the bucket of (window_start,
    query); each one's totals are a state of the bucket (map state ``totals``), under its
    output key."""

    def __init__(self, *, topic: str = "search_ctr") -> None:
        super().__init__(output_schema=OUTPUT_SCHEMA, state_name="totals")
        self.topic = topic

    def on_input(self, key: Any, batch: pd.DataFrame, watermark_ms: int) -> OutputRows:
        sums = batch.groupby(["window_start", "query"], sort=True)[["searches", "clicked"]].sum()
        out: OutputRows = []
        for (start, query), searches, clicked in zip(
            sums.index.tolist(), sums["searches"].tolist(), sums["clicked"].tolist(), strict=True
        ):
            record_key = dumps({"window_start": int(start), "query": str(query)})
            before = self.states.get(record_key) or (0, 0)
            searches, clicked = before[0] + int(searches), before[1] + int(clicked)
            self.states.put(record_key, [searches, clicked])
            value = {
                "window_start": int(start),
                "query": str(query),
                "searches": searches,
                "clicked_searches": clicked,
                "ctr": clicked / searches if searches else 0.0,
            }
            out.append((self.topic, record_key, dumps(value)))
        return out


def build(source: DataFrame) -> DataFrame:
    """``search_ctr`` from a source subscribed to ``searches`` and ``clicks``, read in one
    pass (two filtered branches of the source would read every record twice)."""
    search = F.col("topic") == F.lit("searches")
    parsed = source.select(
        search.alias("is_search"),
        F.from_json(F.col("value").cast("string"), JOIN_FIELDS).alias("e"),
    )
    events = parsed.select(
        F.col("e.search_id").alias("search_id"),
        F.when(F.col("is_search"), F.lit(LEFT)).otherwise(F.lit(RIGHT)).alias(SIDE),
        F.when(F.col("is_search"), F.col("e.query")).alias("query"),
        F.col("e.ts").alias("ts"),
    )
    deltas = interval_join(with_event_time(events, WATERMARK_DELAY), search_clicks())
    return by_bucket(deltas, RunningTotals(), "window_start", "query", time_mode="None")
