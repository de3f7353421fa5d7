"""The ``page_views_sliding`` pipeline: page views per page in hopping 5-minute windows every
minute (an example of the hopping-window operator); late page views go to
``page_views_sliding_late``. Built as ``page_views_per_minute`` is
(:func:`~riverbed.pipelines.shop.page_views_per_minute.page_view_counts`).
"""

from __future__ import annotations

from riverbed.pipelines.shop.contract import MINUTE_MS
from riverbed.pipelines.shop.page_views_per_minute import page_view_counts

__all__ = ["build"]

build = page_view_counts(
    size_ms=5 * MINUTE_MS,
    slide_ms=MINUTE_MS,
    topic="page_views_sliding",
    late_topic="page_views_sliding_late",
)
"""``page_views_sliding`` from a source subscribed to ``page_views``."""
