"""The ``page_views_per_minute`` pipeline (DESIGN.md): page views per page in tumbling
1-minute event-time windows, each written once complete; every page view too late for its
window goes to ``late_events`` with the reason, keyed by ``event_id``.

The operator is :class:`~riverbed.pipelines.operators.windowed_counts.WindowedCounts`
(watermark 2 minutes): :func:`page_view_counter` makes it for any window size and slide,
so ``page_views_sliding`` is the same pipeline with hopping windows. The page views are
parsed in the operator's first step, in Python
(:func:`~riverbed.pipelines.operators.windowed_counts.windowed_json_counts`), with the rules
of Spark's ``from_json``.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame

from riverbed.pipelines.operators.inputs import json_events
from riverbed.pipelines.operators.windowed_counts import WindowedCounts, windowed_json_counts
from riverbed.pipelines.shop.contract import MINUTE_MS, PAGE_VIEW, WATERMARK_DELAY

__all__ = ["build", "page_view_counter", "page_view_counts", "page_views"]


def page_views(source: DataFrame) -> DataFrame:
    """The ``page_views`` events of the source, parsed once. Records that are not page views
    (no ``ts``, ``page`` or ``event_id``) are left out by the operators."""
    return json_events(source, "page_views", PAGE_VIEW)


def page_view_counter(
    *, size_ms: int, slide_ms: int, topic: str, late_topic: str
) -> WindowedCounts:
    """The windowed-count operator of page views per page, late ones to ``late_topic``."""
    return WindowedCounts(
        key_fields=["page"],
        size_ms=size_ms,
        slide_ms=slide_ms,
        topic=topic,
        count_field="views",
        late_topic=late_topic,
        late_key_field="event_id",
        event_fields=PAGE_VIEW.fieldNames(),
    )


def page_view_counts(
    *, size_ms: int, slide_ms: int, topic: str, late_topic: str
) -> Callable[[DataFrame], DataFrame]:
    """Page views per page and window (:func:`page_view_counter`), late ones aside."""

    def build(source: DataFrame) -> DataFrame:
        counts = page_view_counter(
            size_ms=size_ms, slide_ms=slide_ms, topic=topic, late_topic=late_topic
        )
        return windowed_json_counts(source, "page_views", PAGE_VIEW, WATERMARK_DELAY, counts)

    return build


build = page_view_counts(
    size_ms=MINUTE_MS, slide_ms=MINUTE_MS, topic="page_views_per_minute", late_topic="late_events"
)
"""``page_views_per_minute`` from a source subscribed to ``page_views``."""
