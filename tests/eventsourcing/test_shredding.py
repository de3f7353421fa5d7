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
json_values = st.recursive(
    st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=5,
)


@given(json_values, st.text(min_size=1, max_size=10))
def test_a_sealed_field_opens_with_its_subjects_key(value: Any, subject: str) -> None:
    data = {"shipping_address": value, "other": 1}
    sealed = seal_fields(data, ["shipping_address"], key=KEY, subject=subject)
    assert is_sealed(sealed["shipping_address"]) and sealed["other"] == 1
    assert open_fields(sealed, ["shipping_address"], key=KEY, subject=subject) == data


def test_the_plain_text_is_not_in_the_event_and_nonces_differ() -> None:
    data = {"shipping_address": "12 Rue des Lilas, Lyon"}
    first = seal_fields(data, ["shipping_address"], key=KEY, subject="u1")
    second = seal_fields(data, ["shipping_address"], key=KEY, subject="u1")
    assert "Lilas" not in json.dumps(first)
    assert first["shipping_address"]["value"] != second["shipping_address"]["value"]
    assert data == {"shipping_address": "12 Rue des Lilas, Lyon"}  # the input is not changed


def test_a_forgotten_subjects_fields_read_as_null() -> None:
    sealed = seal_fields(
        {"shipping_address": "x", "n": 2}, ["shipping_address"], key=KEY, subject="u"
    )
    assert open_fields(sealed, ["shipping_address"], key=None, subject="u") == {
        "shipping_address": None, "n": 2
    }  # fmt: skip
    assert seal_fields({"shipping_address": None}, ["shipping_address"], key=KEY, subject="u") == {
        "shipping_address": None
    }  # fmt: skip


def test_another_key_another_subject_or_a_changed_byte_do_not_open() -> None:
    sealed = seal_fields({"a": "secret"}, ["a"], key=KEY, subject="u1")
    raw = bytearray(base64.b64decode(sealed["a"]["value"]))
    raw[-1] ^= 1
    tampered = {"a": {**sealed["a"], "value": base64.b64encode(bytes(raw)).decode()}}
    garbled = {"a": {**sealed["a"], "value": "not base64!"}}
    for data, key, subject in [
        (sealed, new_key(), "u1"),
        (sealed, KEY, "u2"),  # moved to another user's event
        (tampered, KEY, "u1"),
        (garbled, KEY, "u1"),
    ]:
        with pytest.raises(
            MessageError, match=f"field 'a' does not open with the key of '{subject}'"
        ):
            open_fields(data, ["a"], key=key, subject=subject)


def test_the_keyring_follows_the_key_topic() -> None:
    ring = Keyring()
    ring.apply(*Keyring.record("u1", KEY, created_ts=5))
    other = new_key()
    ring.apply(*Keyring.record("u2", other, created_ts=6))
    assert ring.key_of("u1") == KEY and ring.key_of("u2") == other
    ring.apply(*Keyring.tombstone("u1"))
    ring.apply(*Keyring.tombstone("u9"))  # forgetting an unknown user is harmless
    assert ring.key_of("u1") is None and ring.key_of("u2") == other
    key, value = Keyring.record("u3", KEY, created_ts=7)
    assert json.loads(key) == {"user_id": "u3"}
    assert json.loads(value) == {
        "user_id": "u3", "key": base64.b64encode(KEY).decode(), "created_ts": 7
    }  # fmt: skip


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (None, b"{}", "a key record whose key is not"),
        (b"[1]", None, "a key record whose key is not"),
        (b"{", None, "a key record whose key is not"),
        (b'{"user_id": "u"}', b"{}", "the key record of 'u' holds no base64 key"),
        (b'{"user_id": "u"}', b'{"key": "!!"}', "the key record of 'u' holds no base64 key"),
        (b'{"user_id": "u"}', b"[]", "the key record of 'u' holds no base64 key"),
    ],
)
def test_a_malformed_key_record_is_one_clear_error(
    key: bytes | None, value: bytes | None, message: str
) -> None:
    with pytest.raises(MessageError, match=message):
        Keyring().apply(key, value)
