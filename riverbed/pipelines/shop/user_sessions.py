"""The ``user_sessions`` pipeline (DESIGN.md): session windows per user, a new session
starting when 30 minutes or more pass between two of the user's page views; each session is
written once the watermark (2 minutes) passes its end plus 30 minutes, keyed ``user_id`` and
``session_start``, with ``session_end`` (the ts of its last page view) and ``page_views``.

The operator is :class:`~riverbed.pipelines.operators.sessions.SessionWindows`; page views
older than the watermark are dropped (they could belong to a session already written).
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from riverbed.pipelines.operators.inputs import with_event_time
from riverbed.pipelines.operators.sessions import SessionWindows, sessions
from riverbed.pipelines.shop.contract import MINUTE_MS, WATERMARK_DELAY
from riverbed.pipelines.shop.page_views_per_minute import page_views

__all__ = ["GAP_MS", "build"]

GAP_MS = 30 * MINUTE_MS
"""DESIGN.md: "a new session starts when 30 minutes or more pass between two of the user's
events"."""


def build(source: DataFrame) -> DataFrame:
    """``user_sessions`` from a source subscribed to ``page_views``."""
    windows = SessionWindows(
        user_field="user_id", gap_ms=GAP_MS, topic="user_sessions", count_field="page_views"
    )
    events = page_views(source).select("user_id", "ts")
    return sessions(with_event_time(events, WATERMARK_DELAY), windows)
