"""The ``user_sessions`` pipeline (DESIGN.md): session windows per user, a new session
starting when 30 minutes or more pass between two of the user's page views; each session is
written once the watermark (2 minutes) passes its end plus 30 minutes, keyed ``user_id`` and
``session_start``, with ``session_end`` (the ts of its last page view) and ``page_views``.

Spark's own session windows do it (``session_window``, a streaming aggregation in the JVM,
append mode): a page view opens the window ``[ts, ts + 30 min)`` and overlapping windows of
a user merge, so a view 30 minutes or more after the last one starts a new session; Spark
writes a session once the watermark reaches its window's end, the last view plus 30
minutes. Page views at or below the watermark are dropped (they could belong to a session
already written), as Spark drops late rows.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from riverbed.pipelines.shop.contract import MINUTE_MS, WATERMARK_DELAY
from riverbed.pipelines.shop.page_views_per_minute import page_views

__all__ = ["GAP_MS", "build"]

GAP_MS = 30 * MINUTE_MS
"""DESIGN.md: "a new session starts when 30 minutes or more pass between two of the user's
events"."""
TOPIC = "user_sessions"


def build(source: DataFrame) -> DataFrame:
    """``user_sessions`` from a source subscribed to ``page_views``."""
    views = page_views(source).where(F.col("user_id").isNotNull())
    timed = views.withColumn("event_time", F.timestamp_millis(F.col("ts"))).withWatermark(
        "event_time", WATERMARK_DELAY
    )
    gap = F.session_window("event_time", f"{GAP_MS // MINUTE_MS} minutes")
    sessions = timed.groupBy(F.col("user_id"), gap).agg(
        F.min("ts").alias("session_start"),
        F.max("ts").alias("session_end"),
        F.count(F.lit(1)).alias("page_views"),
    )
    key = F.to_json(F.struct("user_id", "session_start"))
    value = F.to_json(F.struct("user_id", "session_start", "session_end", "page_views"))
    return sessions.select(F.lit(TOPIC).alias("topic"), key.alias("key"), value.alias("value"))
