"""The pipelines ``riverbed pipeline run NAME`` runs, by name (contracts in DESIGN.md).

A :class:`Pipeline` names its input topics, the topics it writes, and how to turn the
source DataFrame (Spark's Kafka schema, from the riverbed data source) into rows for the
riverbed sink (``topic``, ``key``, ``value``). Every time is event time (``ts``, epoch ms),
with a watermark 2 minutes behind the latest event time seen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql.types import LongType, StringType, StructField, StructType

from riverbed.pipelines import ctr, enrich, fraud, sales
from riverbed.pipelines.inputs import WATERMARK_DELAY, json_events
from riverbed.pipelines.operators import (
    SessionWindows,
    WindowedCounts,
    sessions,
    windowed_counts,
    with_event_time,
)

__all__ = ["PIPELINES", "WATERMARK_DELAY", "Pipeline", "page_views"]

MINUTE_MS = 60_000

PAGE_VIEW = StructType(
    [
        StructField("event_id", StringType()),
        StructField("user_id", StringType()),
        StructField("page", StringType()),
        StructField("ts", LongType()),
    ]
)
PAGE_VIEW_FIELDS = [field.name for field in PAGE_VIEW.fields]


@dataclass(frozen=True)
class Pipeline:
    name: str
    description: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    build: Callable[[DataFrame], DataFrame]


def page_views(source: DataFrame) -> DataFrame:
    """The ``page_views`` events of the source, parsed once. Records that are not page views
    (no ``ts``, ``page`` or ``event_id``) are left out by the operators."""
    return json_events(source, "page_views", PAGE_VIEW)


def _page_view_counts(
    size_ms: int, slide_ms: int, topic: str, late_topic: str
) -> Callable[[DataFrame], DataFrame]:
    """Page views per page and window (the windowed-count operator), late ones aside."""

    def build(source: DataFrame) -> DataFrame:
        counts = WindowedCounts(
            key_fields=["page"],
            size_ms=size_ms,
            slide_ms=slide_ms,
            topic=topic,
            count_field="views",
            late_topic=late_topic,
            late_key_field="event_id",
            event_fields=PAGE_VIEW_FIELDS,
        )
        return windowed_counts(with_event_time(page_views(source), WATERMARK_DELAY), counts)

    return build


def _user_sessions(source: DataFrame) -> DataFrame:
    windows = SessionWindows(
        user_field="user_id", gap_ms=30 * MINUTE_MS, topic="user_sessions", count_field="page_views"
    )
    events = page_views(source).select("user_id", "ts")
    return sessions(with_event_time(events, WATERMARK_DELAY), windows)


PIPELINES: dict[str, Pipeline] = {
    p.name: p
    for p in (
        Pipeline(
            "page_views_per_minute",
            "page views per page in tumbling 1-minute event-time windows (watermark 2 "
            "minutes), each window written once complete; every page view too late for its "
            "window goes to late_events with the reason",
            ("page_views",),
            ("page_views_per_minute", "late_events"),
            _page_view_counts(MINUTE_MS, MINUTE_MS, "page_views_per_minute", "late_events"),
        ),
        Pipeline(
            "user_sessions",
            "sessions per user: a new session starts after 30 minutes or more without a page "
            "view; each session written once the watermark passes its end plus 30 minutes",
            ("page_views",),
            ("user_sessions",),
            _user_sessions,
        ),
        Pipeline(
            "page_views_sliding",
            "page views per page in hopping 5-minute windows every minute (an example of the "
            "hopping-window operator); late page views go to page_views_sliding_late",
            ("page_views",),
            ("page_views_sliding", "page_views_sliding_late"),
            _page_view_counts(
                5 * MINUTE_MS, MINUTE_MS, "page_views_sliding", "page_views_sliding_late"
            ),
        ),
        Pipeline(
            "search_ctr",
            "stream-stream join: searches and the clicks on them (0 to 10 minutes after the "
            "search); per query and 1-minute window of the search: searches, searches with "
            "at least one click, click-through rate",
            ("searches", "clicks"),
            ("search_ctr",),
            ctr.build,
        ),
        Pipeline(
            "enriched_clicks",
            "stream-table join: each click with the user's profile as it was at the click's "
            "event time, from the shop.public.users changelog; a late profile change "
            "corrects the clicks it applies to",
            ("clicks", "shop.public.users"),
            ("enriched_clicks", "enriched_clicks_late"),
            enrich.build,
        ),
        Pipeline(
            "category_sales",
            "table-table join kept up to date: per category, the orders, units and revenue "
            "of the current orders ⨝ products (orders not cancelled, current prices), from "
            "the two CDC changelogs; a category left with no order gets a tombstone",
            ("shop.public.orders", "shop.public.products"),
            ("category_sales",),
            sales.build,
        ),
        Pipeline(
            "fraud_alerts",
            "complex event processing: an approved payment preceded on its card, since the "
            "card's previous approved payment, by 3 or more declined payments in the 10 "
            "minutes before it (event-time order); payments too late to be put in order go "
            "to fraud_alerts_late",
            ("payments",),
            ("fraud_alerts", "fraud_alerts_late"),
            fraud.build,
        ),
    )
}
