"""A command processor's partition without Kafka: idempotent command ids, answers for
malformed commands, sealed personal fields, and the state rebuilt from what it wrote."""

from __future__ import annotations

import json
from typing import Any

import pytest

from riverbed.client.partitioner import murmur2_partition
from riverbed.eventsourcing import Event, MessageError, ReplayError, Result
from riverbed.eventsourcing.partition import CommandPartition, Handled
from riverbed.eventsourcing.shop.carts import CART_TYPE, FORMAT, CartState
from riverbed.eventsourcing.shredding import Keyring, is_sealed, opened


def partition(
    keyring: Keyring | None = None, *, number: int = 0, count: int = 1
) -> CommandPartition[CartState, Any, Any]:
    return CommandPartition(
        kind=CART_TYPE, keyring=keyring or Keyring(), number=number, count=count
    )


def record(command_id: str, type_: str, data: dict[str, Any], **fields: Any) -> bytes:
    value = {
        "command_id": command_id, "type": type_, "cart_id": "cart-1", "user_id": "u1",
        "expected_version": None, "data": data, "ts": 1, **fields,
    }  # fmt: skip
    return json.dumps(value).encode()


ADD = record("c1", "AddItem", {"product_id": "p1", "quantity": 2})
CHECK_OUT = record("c2", "CheckOut", {"shipping_address": "1 Main St"})


def test_a_command_id_is_decided_once() -> None:
    carts = partition()
    first = carts.handle(ADD)
    again = carts.handle(record("c1", "AddItem", {"product_id": "p9", "quantity": 5}))
    assert (first.result.status, first.result.version, first.duplicate) == ("accepted", 1, False)
    assert again == Handled(result=first.result, events=[], new_keys=[], duplicate=True)
    assert dict(carts.aggregate("cart-1").state.items) == {"p1": 2}


def test_a_malformed_command_is_rejected_if_it_can_be_answered() -> None:
    carts = partition()
    bad = carts.handle(record("c1", "AddItem", {}, expected_version="one"))
    assert (bad.result.status, bad.result.reason, bad.events) == ("rejected", "invalid_command", [])
    assert carts.handle(ADD).duplicate  # the same command id: the rejection stands
    with pytest.raises(MessageError, match="'command_id' must be a non-empty string"):
        carts.handle(b'{"cart_id": "cart-1"}')
    with pytest.raises(MessageError, match="not JSON"):
        carts.handle(b"\x00")


def test_personal_fields_are_sealed_with_one_key_per_user() -> None:
    carts = partition()
    carts.handle(ADD)
    checked_out = carts.handle(CHECK_OUT)
    [event] = checked_out.events
    assert is_sealed(event.data["shipping_address"]) and "Main" not in json.dumps(event.data)
    assert checked_out.new_keys == ["u1"] and event.data["shipping_address"]["kid"] in set(
        carts.keyring.keys_of("u1")
    )
    assert opened(event, CART_TYPE.personal, carts.keyring).data == {
        "shipping_address": "1 Main St"
    }
    other_cart = json.dumps({**json.loads(ADD), "command_id": "c3", "cart_id": "cart-2"}).encode()
    carts.handle(other_cart)
    out = json.loads(CHECK_OUT) | {"command_id": "c4", "cart_id": "cart-2"}
    again = carts.handle(json.dumps(out).encode())
    assert again.new_keys == [] and is_sealed(again.events[0].data["shipping_address"])


def written(
    carts: CommandPartition[CartState, Any, Any], *records: bytes
) -> tuple[list[Event], list[Result]]:
    events: list[Event] = []
    results: list[Result] = []
    for value in records:
        handled = carts.handle(value)
        events += handled.events
        results.append(handled.result)
    return events, results


def restore(carts: CommandPartition[CartState, Any, Any], events: list[Event]) -> None:
    """``events`` as the processor restores them: the records' bytes, in log order."""
    with carts.restoring() as restoring:
        for event in events:
            restoring.value(FORMAT.encode_event(event)[1])


def test_a_partition_restored_from_its_topics_answers_as_before() -> None:
    live = partition()
    events, results = written(
        live, ADD, record("c5", "RemoveItem", {"product_id": "p7"}), CHECK_OUT
    )
    restored = partition(Keyring({u: dict(k) for u, k in live.keyring.keys.items()}))
    restore(restored, events)
    for result in results:
        restored.restore_result(result)
    assert restored.aggregates == live.aggregates and restored.results == live.results
    resent = restored.handle(record("c5", "RemoveItem", {"product_id": "p7"}))
    assert resent.duplicate and resent.result.reason == "no_such_item"
    # From a snapshot after version 1: the events it includes are skipped.
    from_snapshot = partition(Keyring({u: dict(k) for u, k in live.keyring.keys.items()}))
    first = partition()
    restore(first, events[:1])
    from_snapshot.restore_snapshot(first.aggregate("cart-1"))
    restore(from_snapshot, events)
    assert from_snapshot.aggregates == live.aggregates


def test_a_forgotten_users_events_still_replay() -> None:
    live = partition()
    events, _ = written(live, ADD, CHECK_OUT)
    forgotten = partition()  # the keyring holds no key for u1
    restore(forgotten, events)
    assert forgotten.aggregates == live.aggregates
    assert opened(events[1], CART_TYPE.personal, forgotten.keyring).data == {
        "shipping_address": None
    }


def test_a_restore_that_meets_a_bad_event_stops_and_changes_nothing() -> None:
    live = partition()
    events, _ = written(live, ADD, record("c6", "AddItem", {"product_id": "p2", "quantity": 1}))
    _, first = FORMAT.encode_event(events[0])
    broken = json.dumps({**json.loads(first), "version": "2"}).encode()
    for records, error, message in [
        ([first, first.replace(b'"version":1', b'"version":3')], ReplayError, "version 3 after 1"),
        ([first, broken], MessageError, "'version' must be an integer"),
        ([b"[]"], MessageError, "must be a JSON object"),
    ]:
        carts = partition()
        with pytest.raises(error, match=message), carts.restoring() as restoring:
            for value in records:
                restoring.value(value)
        assert carts.aggregates == {}


def test_a_command_in_another_partition_than_its_cart_s_is_rejected() -> None:
    home = murmur2_partition(FORMAT.key("cart-1"), 3)
    elsewhere = partition(number=(home + 1) % 3, count=3)
    wrong = elsewhere.handle(ADD)
    assert (wrong.result.status, wrong.result.reason, wrong.result.version) == (
        "rejected", "wrong_partition", 0,
    )  # fmt: skip
    assert wrong.events == [] and elsewhere.aggregates == {}
    malformed = elsewhere.handle(record("c9", "AddItem", {}))
    assert malformed.result.reason == "wrong_partition"
    at_home = partition(number=home, count=3).handle(ADD)
    assert (at_home.result.status, at_home.result.version) == ("accepted", 1)
