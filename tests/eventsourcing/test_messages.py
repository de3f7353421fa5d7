"""The contract's command, event and result formats: round trips, and one clear error for
each malformed field."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from riverbed.eventsourcing import Command, Event, MessageError, Result, StreamFormat

FORMAT = StreamFormat(id_field="cart_id")
ids = st.text(min_size=1, max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)
data = st.dictionaries(st.text(max_size=8), json_values, max_size=4)


@given(
    st.builds(
        Command,
        command_id=ids,
        type=ids,
        aggregate_id=ids,
        user_id=st.none() | ids,
        expected_version=st.none() | st.integers(0, 2**40),
        data=data,
        ts=st.integers(-(2**62), 2**62),
    )
)
def test_commands_round_trip(command: Command) -> None:
    key, value = FORMAT.encode_command(command)
    assert json.loads(key) == {"cart_id": command.aggregate_id}
    assert FORMAT.decode_command(value) == command


@given(
    st.builds(
        Event,
        event_id=ids,
        aggregate_id=ids,
        user_id=st.none() | ids,
        version=st.integers(1, 2**40),
        type=ids,
        data=data,
        command_id=ids,
        ts=st.integers(-(2**62), 2**62),
        schema=st.integers(1, 9),
    )
)
def test_events_round_trip(event: Event) -> None:
    key, value = FORMAT.encode_event(event)
    assert json.loads(key) == {"cart_id": event.aggregate_id}
    assert set(json.loads(value)) == {
        "event_id", "cart_id", "user_id", "version", "type", "data", "command_id", "ts", "schema"
    }  # fmt: skip
    assert FORMAT.decode_event(value) == event


@given(
    st.builds(
        Result,
        command_id=ids,
        aggregate_id=ids,
        status=st.sampled_from(["accepted", "rejected"]),
        version=st.integers(0, 2**40),
        reason=st.none() | ids,
    )
)
def test_results_round_trip(result: Result) -> None:
    key, value = FORMAT.encode_result(result)
    assert json.loads(key) == {"command_id": result.command_id}
    assert ("reason" in json.loads(value)) == (result.reason is not None)
    assert FORMAT.decode_result(value) == result


GOOD = {
    "command_id": "c1", "type": "AddItem", "cart_id": "k1", "user_id": "u1",
    "expected_version": None, "data": {"product_id": "p1", "quantity": 1}, "ts": 5,
}  # fmt: skip


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "a command with no value (a tombstone)"),
        (b"{", "a command that is not JSON"),
        (b"\xff", "a command that is not JSON"),
        (b"[1]", "a command must be a JSON object, not list"),
        (json.dumps({**GOOD, "command_id": ""}).encode(), "'command_id' must be a non-empty"),
        (json.dumps({**GOOD, "cart_id": 7}).encode(), "'cart_id' must be a non-empty string"),
        (json.dumps({**GOOD, "expected_version": -1}).encode(), "'expected_version' must be 0"),
        (json.dumps({**GOOD, "expected_version": True}).encode(), "must be an integer, not True"),
        (json.dumps({**GOOD, "ts": "now"}).encode(), "'ts' must be an integer, not 'now'"),
        (json.dumps({**GOOD, "data": [1]}).encode(), "'data' must be a JSON object, not [1]"),
    ],
)
def test_a_malformed_command_is_one_clear_error(value: bytes | None, message: str) -> None:
    with pytest.raises(MessageError, match=re.escape(message)):
        FORMAT.decode_command(value)


def test_an_event_version_or_schema_of_zero_is_refused() -> None:
    event = Event(
        event_id="e", aggregate_id="k", user_id=None, version=1, type="T", data={},
        command_id="c", ts=0, schema=1,
    )  # fmt: skip
    _, value = FORMAT.encode_event(event)
    for field in ("version", "schema"):
        broken = json.dumps({**json.loads(value), field: 0}).encode()
        with pytest.raises(MessageError, match="start at 1"):
            FORMAT.decode_event(broken)


def test_a_result_status_is_accepted_or_rejected() -> None:
    value = json.dumps({"command_id": "c", "cart_id": "k", "status": "maybe", "version": 0})
    with pytest.raises(MessageError, match="status must be 'accepted' or 'rejected'"):
        FORMAT.decode_result(value.encode())


VALID_EVENT = {
    "event_id": "c-1:1", "cart_id": "c-1", "user_id": "u1", "version": 1, "type": "ItemAdded",
    "data": {"product_id": "p1", "quantity": 1}, "command_id": "cmd-1", "ts": 5, "schema": 1,
}  # fmt: skip
MISSING = object()
ODD_VALUES = [MISSING, None, True, False, 0, -1, 2**63, "", "x", 1.5, [], {}, {"a": 1}]


def valid_field(name: str, value: object) -> bool:
    """The contract's rule for one field of an event or a command (DESIGN.md; messages.py)."""
    integer = isinstance(value, int) and not isinstance(value, bool)
    text = isinstance(value, str) and value != ""
    return {
        "user_id": value is None or text,
        "version": integer and value >= 1,  # type: ignore[operator]
        "schema": integer and value >= 1,  # type: ignore[operator]
        "expected_version": value is None or (integer and value >= 0),  # type: ignore[operator]
        "ts": integer,
        "data": isinstance(value, dict),
    }.get(name, text)


@pytest.mark.parametrize("name", sorted(VALID_EVENT))
@pytest.mark.parametrize("value", ODD_VALUES, ids=repr)
def test_an_event_is_read_only_when_every_field_follows_the_contract(
    name: str, value: object
) -> None:
    """Both ways decode_event reads (all fields at once, or one by one for the error) agree
    with the contract: an event whose fields all follow it is read as it is, anything else
    raises MessageError. A missing ``data`` reads as ``{}``, a missing ``user_id`` as None."""
    document = {k: v for k, v in {**VALID_EVENT, name: value}.items() if v is not MISSING}
    filled = {"data": {}, "user_id": None, **document}
    if set(filled) == set(VALID_EVENT) and all(valid_field(k, filled[k]) for k in filled):
        assert FORMAT.document(FORMAT.decode_event(json.dumps(document).encode())) == filled
    else:
        with pytest.raises(MessageError):
            FORMAT.decode_event(json.dumps(document).encode())


VALID_COMMAND = {
    "command_id": "cmd-1", "type": "AddItem", "cart_id": "c-1", "user_id": "u1",
    "expected_version": 0, "data": {"product_id": "p1", "quantity": 1}, "ts": 5,
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(VALID_COMMAND))
@pytest.mark.parametrize("value", ODD_VALUES, ids=repr)
def test_a_command_is_read_only_when_every_field_follows_the_contract(
    name: str, value: object
) -> None:
    """As for events: a missing ``data`` reads as ``{}``, a missing ``user_id`` and
    ``expected_version`` as None."""
    document = {k: v for k, v in {**VALID_COMMAND, name: value}.items() if v is not MISSING}
    filled = {"data": {}, "user_id": None, "expected_version": None, **document}
    if set(filled) == set(VALID_COMMAND) and all(valid_field(k, filled[k]) for k in filled):
        assert FORMAT.document(FORMAT.decode_command(json.dumps(document).encode())) == filled
    else:
        with pytest.raises(MessageError):
            FORMAT.decode_command(json.dumps(document).encode())
