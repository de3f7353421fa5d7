"""The shop's event-sourced aggregates: its shopping carts (:mod:`.carts`).

``AGGREGATE_TYPES`` names them as ``riverbed es`` takes them (``riverbed es run carts``).
"""

from typing import Any

from riverbed.eventsourcing.aggregate_type import AggregateType
from riverbed.eventsourcing.shop.carts import CART_TYPE

__all__ = ["AGGREGATE_TYPES"]

AGGREGATE_TYPES: dict[str, AggregateType[Any, Any, Any]] = {"carts": CART_TYPE}
