"""Upcasting: a v1 → v2 change of the carts' ItemAdded, read through the chain; the stored
events are not touched."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from riverbed.eventsourcing import (
    Aggregate,
    Command,
    Event,
    MessageError,
    UpcastError,
    Upcasters,
    decide,
    replay,
)
from riverbed.eventsourcing.shop.carts import CARTS, TYPES


def v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """ItemAdded v1 named the product ``sku`` and always added one unit."""
    return {"product_id": data.pop("sku"), "quantity": 1, **data}


UPCASTERS = Upcasters(current={"ItemAdded": 2}, steps={("ItemAdded", 1): v1_to_v2})
TYPES_V2 = dataclasses.replace(TYPES, upcasters=UPCASTERS)
EMPTY = Aggregate(aggregate_id="c", state=CARTS.initial, version=0)


def stored(version: int, type_: str, data: dict[str, Any], schema: int) -> Event:
    return Event(
        event_id=f"c:{version}", aggregate_id="c", user_id="u", version=version, type=type_,
        data=data, command_id=f"cmd-{version}", ts=version, schema=schema,
    )  # fmt: skip


def test_old_and_new_events_replay_in_the_current_schema() -> None:
    v1 = stored(1, "ItemAdded", {"sku": "p1"}, schema=1)
    v2 = stored(2, "ItemAdded", {"product_id": "p1", "quantity": 2}, schema=2)
    removed = stored(3, "ItemRemoved", {"product_id": "p1"}, schema=1)
    again = stored(4, "ItemAdded", {"sku": "p2"}, schema=1)
    cart = replay(CARTS, TYPES_V2, EMPTY, [v1, v2])
    assert dict(cart.state.items) == {"p1": 3}
    assert dict(replay(CARTS, TYPES_V2, cart, [removed, again]).state.items) == {"p2": 1}
    assert v1.data == {"sku": "p1"} and v1.schema == 1  # the stored event is unchanged
    assert UPCASTERS.upcast(v1).data == {"product_id": "p1", "quantity": 1}
    assert UPCASTERS.upcast(removed) is removed  # a type without versions stays at 1
    # Without the upcaster, the v1 event cannot be read as the current ItemAdded.
    with pytest.raises(MessageError, match=r"event c:1 \(ItemAdded version 1\): no 'product_id'"):
        replay(CARTS, TYPES, EMPTY, [v1])


def test_new_events_are_written_in_the_current_schema() -> None:
    command = Command(
        command_id="x", type="AddItem", aggregate_id="c", user_id="u", expected_version=None,
        data={"product_id": "p", "quantity": 1}, ts=0,
    )  # fmt: skip
    [event] = decide(CARTS, TYPES_V2, EMPTY, command).events
    assert event.schema == 2


def test_a_version_with_no_way_to_the_current_one_is_an_error() -> None:
    newer = stored(1, "ItemAdded", {"product_id": "p", "quantity": 1}, schema=3)
    with pytest.raises(UpcastError, match="ItemAdded version 3; this code knows versions up to 2"):
        replay(CARTS, TYPES_V2, EMPTY, [newer])
    gap = Upcasters(current={"ItemAdded": 3}, steps={("ItemAdded", 2): lambda d: d})
    with pytest.raises(UpcastError, match="no upcaster leads from version 1 to 2"):
        gap.upcast(stored(1, "ItemAdded", {"sku": "p"}, schema=1))
    with pytest.raises(ValueError, match="current version is 1"):
        Upcasters(steps={("ItemRemoved", 1): lambda d: d})
