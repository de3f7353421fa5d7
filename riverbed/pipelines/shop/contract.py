"""What DESIGN.md fixes for the shop's pipelines, in one place: the watermark delay, and the
fields of the event topics (DESIGN.md, "The shop workload", and the carts' events,
"Event sourcing"): JSON objects, event time an integer ``ts`` in epoch ms. Fields are
nullable: a record that lacks one gives a null, which the pipelines leave out.
"""

from __future__ import annotations

from pyspark.sql.types import DataType, LongType, StringType, StructField, StructType

__all__ = [
    "CART_EVENT",
    "CART_EVENTS_TOPIC",
    "CLICK",
    "MINUTE_MS",
    "PAGE_VIEW",
    "PAYMENT",
    "SEARCH",
    "WATERMARK_DELAY",
]

WATERMARK_DELAY = "2 minutes"
"""DESIGN.md: every pipeline uses event time with a watermark 2 minutes behind the latest
event time seen."""
MINUTE_MS = 60_000

_TEXT, _LONG = StringType(), LongType()


def _event(*columns: tuple[str, DataType]) -> StructType:
    return StructType([StructField(name, data_type) for name, data_type in columns])


PAGE_VIEW = _event(("event_id", _TEXT), ("user_id", _TEXT), ("page", _TEXT), ("ts", _LONG))
"""``page_views`` [user_id]."""
SEARCH = _event(("search_id", _TEXT), ("user_id", _TEXT), ("query", _TEXT), ("ts", _LONG))
"""``searches`` [user_id]."""
CLICK = _event(
    ("click_id", _TEXT),
    ("search_id", _TEXT),
    ("user_id", _TEXT),
    ("product_id", _TEXT),
    ("ts", _LONG),
)
"""``clicks`` [user_id]."""
PAYMENT = _event(
    ("payment_id", _TEXT),
    ("card_id", _TEXT),
    ("user_id", _TEXT),
    ("amount_cents", _LONG),
    ("status", _TEXT),
    ("ts", _LONG),
)
"""``payments`` [card_id]; ``status`` is ``approved`` or ``declined``."""

CART_EVENTS_TOPIC = "shop.carts.events"
"""The carts' events (DESIGN.md, "Event sourcing"), written in transactions: read them
read_committed, as the riverbed source does unless told otherwise."""
CART_EVENT = _event(
    ("event_id", _TEXT),
    ("cart_id", _TEXT),
    ("user_id", _TEXT),
    ("version", _LONG),
    ("type", _TEXT),
    ("data", _event(("product_id", _TEXT))),
    ("command_id", _TEXT),
    ("ts", _LONG),
    ("schema", _LONG),
)
"""``shop.carts.events`` [cart_id]; ``type`` is ``ItemAdded``, ``ItemRemoved`` or
``CheckedOut``. Of ``data`` only ``product_id`` is read (all of ``ItemRemoved``'s data;
``ItemAdded`` has a ``quantity`` too, ``CheckedOut`` only the encrypted
``shipping_address``, which no pipeline reads)."""
