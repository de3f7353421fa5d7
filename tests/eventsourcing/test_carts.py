"""The shop's carts and the contract's rules around a decider (expected_version, versions,
event ids, replay), without Kafka."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from riverbed.eventsourcing import Aggregate, Command, MessageError, ReplayError, decide, replay
from riverbed.eventsourcing.shop.carts import CART_TYPE, CARTS, TYPES, CartState

EMPTY = Aggregate(aggregate_id="cart-1", state=CARTS.initial, version=0)


def command(
    type_: str, data: dict[str, Any], *, n: int = 1, expected: int | None = None, user: str = "u1"
) -> Command:
    return Command(
        command_id=f"cmd-{n}", type=type_, aggregate_id="cart-1", user_id=user,
        expected_version=expected, data=data, ts=1_000 + n,
    )  # fmt: skip


def run(*commands: Command) -> tuple[Aggregate[CartState], list[Any]]:
    cart, results = EMPTY, []
    for c in commands:
        decision = decide(CARTS, TYPES, cart, c)
        cart = decision.aggregate
        results.append((decision.result.status, decision.result.version, decision.result.reason))
    return cart, results


def test_a_cart_adds_removes_and_checks_out() -> None:
    cart, results = run(
        command("AddItem", {"product_id": "p1", "quantity": 2}, n=1),
        command("AddItem", {"product_id": "p1", "quantity": 1}, n=2, expected=1),
        command("AddItem", {"product_id": "p2", "quantity": 1}, n=3),
        command("RemoveItem", {"product_id": "p2"}, n=4),
        command("CheckOut", {"shipping_address": "1 Main St"}, n=5, expected=4),
    )
    assert results == [("accepted", v, None) for v in range(1, 6)]
    assert CART_TYPE.document(cart) == {
        "cart_id": "cart-1", "user_id": "u1", "version": 5, "items": {"p1": 3},
        "checked_out": True,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("commands", "reason"),
    [
        ([command("RemoveItem", {"product_id": "p9"})], "no_such_item"),
        ([command("CheckOut", {"shipping_address": "x"})], "empty_cart"),
        ([command("AddItem", {"product_id": "p1", "quantity": 0})], "invalid_command"),
        ([command("AddItem", {"product_id": "p1", "quantity": True})], "invalid_command"),
        ([command("AddItem", {"product_id": "", "quantity": 1})], "invalid_command"),
        ([command("CheckOut", {})], "invalid_command"),
        ([command("Discount", {"percent": 10})], "invalid_command"),
        ([command("AddItem", {"product_id": "p1", "quantity": 1}, expected=3)], "version_conflict"),
        (
            [
                command("AddItem", {"product_id": "p1", "quantity": 1}, n=1),
                command("CheckOut", {"shipping_address": "x"}, n=2),
                command("AddItem", {"product_id": "p2", "quantity": 1}, n=3),
            ],
            "checked_out",
        ),
    ],
)
def test_refused_commands_add_no_event(commands: list[Command], reason: str) -> None:
    before, _ = run(*commands[:-1])
    decision = decide(CARTS, TYPES, before, commands[-1])
    assert decision.result.status == "rejected" and decision.result.reason == reason
    assert decision.events == [] and decision.aggregate == before
    assert decision.result.version == before.version


def test_events_carry_the_command_and_ids_from_the_version() -> None:
    decision = decide(CARTS, TYPES, EMPTY, command("AddItem", {"product_id": "p", "quantity": 4}))
    [event] = decision.events
    assert (event.event_id, event.version, event.command_id, event.ts, event.user_id) == (
        "cart-1:1", 1, "cmd-1", 1_001, "u1"
    )  # fmt: skip
    assert (event.type, event.data, event.schema) == (
        "ItemAdded", {"product_id": "p", "quantity": 4}, 1
    )  # fmt: skip


commands = st.lists(
    st.tuples(
        st.sampled_from(["AddItem", "RemoveItem", "CheckOut", "Nope"]),
        st.sampled_from(["p1", "p2", "p3"]),
        st.integers(0, 3),
        st.none() | st.integers(0, 6),
        st.sampled_from(["u1", "u2"]),
    ),
    max_size=25,
)


@given(commands)
def test_replaying_the_events_gives_the_decided_state(script: list[Any]) -> None:
    cart, events = EMPTY, []
    for n, (type_, product, quantity, expected, user) in enumerate(script):
        data = {"product_id": product, "quantity": quantity, "shipping_address": "addr"}
        decision = decide(
            CARTS, TYPES, cart, command(type_, data, n=n, expected=expected, user=user)
        )
        events += decision.events
        cart = decision.aggregate
    assert [e.version for e in events] == list(range(1, cart.version + 1))  # dense, no repeat
    assert replay(CARTS, TYPES, EMPTY, events) == cart
    middle = len(events) // 2  # a snapshot of the first half, then the rest
    assert (
        replay(CARTS, TYPES, replay(CARTS, TYPES, EMPTY, events[:middle]), events[middle:]) == cart
    )
    assert all(q >= 1 for q in cart.state.items.values())


def test_an_event_the_cart_cannot_read_is_a_message_error() -> None:
    event = decide(CARTS, TYPES, EMPTY, command("AddItem", {"product_id": "p", "quantity": 1}))
    stray = dataclasses.replace(event.events[0], type="Teleported")
    teleported = r"event cart-1:1 \(Teleported version 1\): not a cart event"
    with pytest.raises(MessageError, match=teleported):
        replay(CARTS, TYPES, EMPTY, [stray])


def test_replay_refuses_a_gap_or_a_repeat() -> None:
    decision = decide(CARTS, TYPES, EMPTY, command("AddItem", {"product_id": "p", "quantity": 1}))
    event = decision.events[0]
    with pytest.raises(ReplayError, match="event version 2 after 0"):
        replay(CARTS, TYPES, EMPTY, [dataclasses.replace(event, version=2)])
    with pytest.raises(ReplayError, match="event version 1 after 1"):
        replay(CARTS, TYPES, EMPTY, [event, event])
