"""Crypto-shredding's pure part: fields sealed per subject, opened with the key, null once
the key is forgotten; tampering and misuse are errors."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from riverbed.eventsourcing import MessageError
from riverbed.eventsourcing.shredding import (
    Keyring,
    is_sealed,
    new_key,
    open_fields,
    seal_fields,
)

KEY = new_key()
KEYS = {"k1": KEY}
json_values = st.recursive(
    st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=5,
)


@given(json_values, st.text(min_size=1, max_size=10))
def test_a_sealed_field_opens_with_its_subjects_key(value: Any, subject: str) -> None:
    data = {"shipping_address": value, "other": 1}
    sealed = seal_fields(data, ["shipping_address"], key_id="k1", key=KEY, subject=subject)
    assert is_sealed(sealed["shipping_address"]) and sealed["other"] == 1
    assert open_fields(sealed, ["shipping_address"], keys=KEYS, subject=subject) == data


def test_the_plain_text_is_not_in_the_event_and_nonces_differ() -> None:
    data = {"shipping_address": "12 Rue des Lilas, Lyon"}
    first = seal_fields(data, ["shipping_address"], key_id="k1", key=KEY, subject="u1")
    second = seal_fields(data, ["shipping_address"], key_id="k1", key=KEY, subject="u1")
    assert "Lilas" not in json.dumps(first)
    assert first["shipping_address"]["value"] != second["shipping_address"]["value"]
    assert data == {"shipping_address": "12 Rue des Lilas, Lyon"}  # the input is not changed


def test_a_forgotten_subjects_fields_read_as_null() -> None:
    data = {"shipping_address": "x", "n": 2}
    sealed = seal_fields(data, ["shipping_address"], key_id="k1", key=KEY, subject="u")
    assert sealed["shipping_address"]["kid"] == "k1"
    assert open_fields(sealed, ["shipping_address"], keys=KEYS, subject="u") == data
    assert open_fields(sealed, ["shipping_address"], keys={}, subject="u") == {
        "shipping_address": None, "n": 2
    }  # fmt: skip
    nothing = {"shipping_address": None}
    assert seal_fields(nothing, ["shipping_address"], key_id="k1", key=KEY, subject="u") == nothing


def test_another_key_another_subject_or_a_changed_byte_do_not_open() -> None:
    sealed = seal_fields({"a": "secret"}, ["a"], key_id="k1", key=KEY, subject="u1")
    raw = bytearray(base64.b64decode(sealed["a"]["value"]))
    raw[-1] ^= 1
    tampered = {"a": {**sealed["a"], "value": base64.b64encode(bytes(raw)).decode()}}
    garbled = {"a": {**sealed["a"], "value": "not base64!"}}
    for data, key, subject in [
        (sealed, {"k1": new_key()}, "u1"),
        (sealed, KEYS, "u2"),  # moved to another user's event
        (tampered, KEYS, "u1"),
        (garbled, KEYS, "u1"),
    ]:
        with pytest.raises(
            MessageError, match=f"field 'a' does not open with the key of '{subject}'"
        ):
            open_fields(data, ["a"], keys=key, subject=subject)


def test_the_keyring_follows_the_key_topic() -> None:
    writer = Keyring()
    writer.add("u1", "k1", KEY)
    other = new_key()
    writer.add("u2", "k2", other)
    ring = Keyring()
    assert ring.apply(*writer.record("u1", created_ts=5)) is False
    assert ring.apply(*writer.record("u2", created_ts=6)) is False
    assert ring.keys_of("u1") == {"k1": KEY} and ring.sealing_key("u2") == ("k2", other)
    assert ring.apply(*Keyring.tombstone("u1")) is False
    ring.apply(*Keyring.tombstone("u9"))  # forgetting an unknown user is harmless
    assert ring.keys_of("u1") == {} and ring.sealing_key("u1") is None
    key, value = writer.record("u1", created_ts=7)
    assert json.loads(key) == {"user_id": "u1"}
    assert json.loads(value) == {
        "user_id": "u1", "keys": {"k1": base64.b64encode(KEY).decode()}, "created_ts": 7
    }  # fmt: skip


def test_two_first_keys_made_at_once_end_as_one_set() -> None:
    """Processors A and B each make a first key for u; the topic holds A's record, then
    B's. A reads B's record, which lacks its key, and writes the union; every reader ends
    with both keys, and everyone seals with the same one."""
    a, b, reader = Keyring(), Keyring(), Keyring()
    a.add("u", "kA", KEY)
    b.add("u", "kB", new_key())
    log = [a.record("u", created_ts=1), b.record("u", created_ts=1)]
    assert b.apply(*log[0]) is True  # lacks kB: b writes a union too (harmless, the same)
    assert b.apply(*log[1]) is True  # b's own record lacks the kA it has learnt
    assert a.apply(*log[0]) is False
    assert a.apply(*log[1]) is True  # b's record lacks kA: a writes the union
    log.append(a.record("u", created_ts=2))
    b_union = json.loads(b.record("u", created_ts=3)[1])["keys"]
    assert json.loads(log[-1][1])["keys"] == b_union  # a's union and b's are the same
    for record in log[-1:]:  # after compaction only the union is left
        reader.apply(*record)
    assert reader.keys_of("u") == a.keys_of("u") == b.keys_of("u")
    assert set(reader.keys_of("u")) == {"kA", "kB"}
    assert reader.sealing_key("u") == a.sealing_key("u") == b.sealing_key("u")
    reader.apply(*Keyring.tombstone("u"))
    assert reader.keys_of("u") == {}


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (None, b"{}", "a key record whose key is not"),
        (b"[1]", None, "a key record whose key is not"),
        (b"{", None, "a key record whose key is not"),
        (b'{"user_id": "u"}', b"{}", "the key record of 'u' holds no base64 keys"),
        (b'{"user_id": "u"}', b'{"keys": {"k": "!!"}}', "the key record of 'u' holds no base64"),
        (b'{"user_id": "u"}', b'{"keys": []}', "the key record of 'u' holds no base64 keys"),
        (b'{"user_id": "u"}', b"[]", "the key record of 'u' holds no base64 keys"),
    ],
)
def test_a_malformed_key_record_is_one_clear_error(
    key: bytes | None, value: bytes | None, message: str
) -> None:
    with pytest.raises(MessageError, match=message):
        Keyring().apply(key, value)
