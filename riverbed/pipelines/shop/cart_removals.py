"""The ``cart_removals`` pipeline: per product and tumbling 1-hour event-time window, how
many times a product was put in a cart and taken out again before checkout, from the
event-sourced carts (DESIGN.md, "Event sourcing"): the ``ItemRemoved`` events of
``shop.carts.events``, counted per ``product_id`` and window of the event's ``ts``. (A cart
accepts ``RemoveItem`` only for a line it holds and only until it is checked out, so every
``ItemRemoved`` is such a removal.) This is what the log keeps and a table of current carts
loses: a line added and removed again leaves no trace in the cart's state.

Written to ``cart_removals``, keyed ``{window_start, product_id}``, value ``{window_start,
window_end, product_id, removals}``, each window once, when the watermark (2 minutes
behind the latest event time seen) reaches its end. The operator is
:class:`~riverbed.pipelines.operators.windowed_counts.WindowedCounts`, as for
``page_views_per_minute``, and like it this pipeline never drops a removal silently: one
too late for its window (the window already written) goes to ``cart_removals_late``, keyed
``{event_id}``, the event plus a ``reason``.

**Every cart event moves the watermark**, not only the removals: event time advances with
``ItemAdded`` and ``CheckedOut`` as well, so a window is written once the carts' stream as a
whole has passed it, even if no removal follows. Hence events of other types are not
filtered out in Spark (a filter would be pushed below the watermark); their ``product_id``
is null (:func:`removals`) and the operator leaves them out before the shuffle.

Unreadable records are left out, as by the other pipelines: a tombstone, a value that is
not a JSON object, or an ``ItemRemoved`` without ``event_id``, ``data.product_id`` or an
integer ``ts`` (a record without ``ts`` does not move the watermark either). The events are
written in transactions; the riverbed source reads ``read_committed`` by default, so an
aborted transaction's events are never counted.

``ItemRemoved``'s ``data`` is at schema version 1; should its shape change (a new schema
version, DESIGN.md's upcasting), :func:`removals` must read both.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from riverbed.pipelines.operators.inputs import json_events
from riverbed.pipelines.operators.windowed_counts import WindowedCounts, windowed_counts
from riverbed.pipelines.shop.contract import (
    CART_EVENT,
    CART_EVENTS_TOPIC,
    MINUTE_MS,
    WATERMARK_DELAY,
)

__all__ = ["ITEM_REMOVED", "WINDOW_MS", "build", "removals"]

WINDOW_MS = 60 * MINUTE_MS
"""Tumbling 1-hour windows (the pipeline's contract)."""
ITEM_REMOVED = "ItemRemoved"


def removals(source: DataFrame) -> DataFrame:
    """The carts' events, parsed once, with a ``product_id`` column: the removed product of
    an ``ItemRemoved``, null for every other event (module docstring)."""
    events = json_events(source, CART_EVENTS_TOPIC, CART_EVENT)
    return events.withColumn(
        "product_id", F.when(F.col("type") == F.lit(ITEM_REMOVED), F.col("data.product_id"))
    )


def build(source: DataFrame) -> DataFrame:
    """``cart_removals`` (and ``cart_removals_late``) from a source subscribed to
    ``shop.carts.events``."""
    counts = WindowedCounts(
        key_fields=["product_id"],
        size_ms=WINDOW_MS,
        slide_ms=WINDOW_MS,
        topic="cart_removals",
        count_field="removals",
        late_topic="cart_removals_late",
        late_key_field="event_id",
        event_fields=CART_EVENT.fieldNames(),
    )
    return windowed_counts(removals(source), WATERMARK_DELAY, counts)
