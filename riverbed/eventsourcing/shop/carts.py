"""The shop's shopping cart, event-sourced (DESIGN.md, "Event sourcing").

    AddItem {product_id, quantity >= 1}  -> ItemAdded   (the quantity adds to the line)
    RemoveItem {product_id}              -> ItemRemoved (the line must exist; removed whole)
    CheckOut {shipping_address}          -> CheckedOut  (the cart must hold an item)

A checked-out cart refuses every command. The cart's user is the user of its first event,
its aggregate's ``subject`` (the contract has no rule about a command from another user, so
none is made).
``shipping_address`` is personal data: in events it is encrypted with the user's key, and
``None`` once the user is forgotten (crypto-shredding); the cart only records it.

Rejection reasons: ``invalid_command`` (an unknown type, a missing or wrong field),
``no_such_item``, ``empty_cart``, ``checked_out``; and the contract's ``version_conflict``
(:mod:`riverbed.eventsourcing.handling`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from riverbed.eventsourcing.aggregate_type import AggregateType
from riverbed.eventsourcing.decider import Decider, Rejection
from riverbed.eventsourcing.errors import MessageError
from riverbed.eventsourcing.handling import DomainTypes
from riverbed.eventsourcing.messages import Command, StreamFormat
from riverbed.eventsourcing.topics import Topics

__all__ = [
    "CARTS",
    "CART_TYPE",
    "FORMAT",
    "PERSONAL_FIELDS",
    "TOPICS",
    "TYPES",
    "AddItem",
    "CartState",
    "CheckOut",
    "CheckedOut",
    "ItemAdded",
    "ItemRemoved",
    "RemoveItem",
]

FORMAT = StreamFormat(id_field="cart_id")
"""The carts' topics: keys ``{"cart_id"}``."""

TOPICS = Topics(
    commands="shop.carts.commands",
    events="shop.carts.events",
    results="shop.carts.results",
    snapshots="shop.carts.snapshots",
    keys="shop.keys",
)
"""The contract's topic names."""

PERSONAL_FIELDS: dict[str, tuple[str, ...]] = {"CheckedOut": ("shipping_address",)}
"""Event data fields encrypted with the user's key."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AddItem:
    product_id: str
    quantity: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveItem:
    product_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckOut:
    shipping_address: str


CartCommand = AddItem | RemoveItem | CheckOut


@dataclass(frozen=True, slots=True, kw_only=True)
class ItemAdded:
    product_id: str
    quantity: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ItemRemoved:
    product_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckedOut:
    shipping_address: str | None  # None: the user was forgotten


CartEvent = ItemAdded | ItemRemoved | CheckedOut


@dataclass(frozen=True, slots=True, kw_only=True)
class CartState:
    items: MappingProxyType[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """Product id -> quantity, read-only. ``evolve`` copies it with ``copy()``, a dict's
    own copy (0.08 µs); ``dict()`` of a mapping proxy goes key by key (0.53 µs, a tenth of
    a replay)."""
    checked_out: bool = False


def decide(state: CartState, command: CartCommand) -> Sequence[CartEvent] | Rejection:
    if state.checked_out:
        return Rejection(reason="checked_out")
    match command:
        case AddItem(product_id=product_id, quantity=quantity):
            return [ItemAdded(product_id=product_id, quantity=quantity)]
        case RemoveItem(product_id=product_id):
            if product_id not in state.items:
                return Rejection(reason="no_such_item")
            return [ItemRemoved(product_id=product_id)]
        case CheckOut(shipping_address=address):
            if not state.items:
                return Rejection(reason="empty_cart")
            return [CheckedOut(shipping_address=address)]


def evolve(state: CartState, event: CartEvent) -> CartState:
    match event:
        case ItemAdded(product_id=product_id, quantity=quantity):
            items = state.items.copy()
            items[product_id] = items.get(product_id, 0) + quantity
            return CartState(items=MappingProxyType(items), checked_out=False)
        case ItemRemoved(product_id=product_id):
            items = {p: q for p, q in state.items.items() if p != product_id}
            return CartState(items=MappingProxyType(items), checked_out=False)
        case CheckedOut():
            return CartState(items=state.items, checked_out=True)


CARTS: Decider[CartState, CartCommand, CartEvent] = Decider(
    initial=CartState(), decide=decide, evolve=evolve
)


def _command_of(command: Command) -> CartCommand | Rejection:
    data = command.data
    product = data.get("product_id")
    product_id = product if isinstance(product, str) else ""
    has_product = product_id != ""
    if command.type == "AddItem" and has_product:
        quantity = data.get("quantity")
        if isinstance(quantity, int) and not isinstance(quantity, bool) and quantity >= 1:
            return AddItem(product_id=product_id, quantity=quantity)
    elif command.type == "RemoveItem" and has_product:
        return RemoveItem(product_id=product_id)
    elif command.type == "CheckOut":
        address = data.get("shipping_address")
        if isinstance(address, str) and address:
            return CheckOut(shipping_address=address)
    return Rejection(reason="invalid_command")


def _event_of(event_type: str, data: dict[str, Any]) -> CartEvent:
    try:
        if event_type == "ItemAdded":
            return ItemAdded(product_id=data["product_id"], quantity=data["quantity"])
        if event_type == "ItemRemoved":
            return ItemRemoved(product_id=data["product_id"])
        if event_type == "CheckedOut":
            return CheckedOut(shipping_address=data.get("shipping_address"))
    except KeyError as e:
        raise MessageError(f"no {e}") from None
    raise MessageError("not a cart event")


def _event_data(event: CartEvent) -> tuple[str, dict[str, Any]]:
    match event:
        case ItemAdded(product_id=product_id, quantity=quantity):
            return "ItemAdded", {"product_id": product_id, "quantity": quantity}
        case ItemRemoved(product_id=product_id):
            return "ItemRemoved", {"product_id": product_id}
        case CheckedOut(shipping_address=address):
            return "CheckedOut", {"shipping_address": address}


TYPES: DomainTypes[CartCommand, CartEvent] = DomainTypes(
    command_of=_command_of, event_of=_event_of, event_data=_event_data
)


def _state_fields(state: CartState) -> dict[str, Any]:
    return {"items": dict(sorted(state.items.items())), "checked_out": state.checked_out}


def _state_of(document: Mapping[str, Any]) -> CartState:
    items, checked_out = document.get("items"), document.get("checked_out")
    if not isinstance(items, dict) or not isinstance(checked_out, bool):
        raise MessageError(f"not a cart state: {dict(document)!r:.200}")
    for product_id, quantity in items.items():
        if not isinstance(quantity, int) or isinstance(quantity, bool) or quantity < 1:
            raise MessageError(f"cart line {product_id!r}: quantity {quantity!r}")
    return CartState(items=MappingProxyType(dict(items)), checked_out=checked_out)


CART_TYPE: AggregateType[CartState, CartCommand, CartEvent] = AggregateType(
    name="carts",
    decider=CARTS,
    types=TYPES,
    format=FORMAT,
    topics=TOPICS,
    state_fields=_state_fields,
    state_of=_state_of,
    personal=PERSONAL_FIELDS,
)
"""The carts, as the processor, the readers and the projections take them. A cart's state
document is the contract's ``{"cart_id", "user_id", "version", "items", "checked_out"}``."""
