"""Crypto-shredding: personal fields encrypted per subject, forgotten by deleting the key.

Events are never changed, yet a user may ask to be forgotten. So an event's personal
fields (the carts' ``shipping_address``) are stored encrypted with a key of their subject
(the user), and the keys live in a compacted topic (``shop.keys``: key ``{"user_id"}``,
value ``{"user_id", "key", "created_ts"}``, the key base64). Forgetting the user writes a
tombstone for their key; compaction then removes the key itself from the log, and from then
on every reader, replay and backup of the events finds the field unreadable and sees
``null``. The events themselves stay, so versions, history and every other field do too.

A sealed field is a JSON object ``{"sealed": "A256GCM", "value": BASE64}``: the value is a
12-byte random nonce followed by the AES-256-GCM ciphertext and tag of the field's JSON,
with the subject's id as associated data (a ciphertext moved to another user's event does
not open). Nonces are random: 2^32 encryptions under one key keep the chance of a repeat
below 2^-32 (NIST SP 800-38D, 8.3); one user's key seals far fewer.

Sans-IO: :class:`Keyring` is fed the key topic's records by whoever reads it.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from riverbed.eventsourcing.errors import MessageError
from riverbed.eventsourcing.messages import dumps

__all__ = ["ALGORITHM", "Keyring", "is_sealed", "new_key", "open_fields", "seal_fields"]

ALGORITHM = "A256GCM"
"""JOSE's name (RFC 7518) for AES-GCM with a 256-bit key."""

NONCE_BYTES = 12
"""GCM's recommended nonce size (NIST SP 800-38D, 5.2.1.1)."""


def new_key() -> bytes:
    """A fresh 256-bit key."""
    return AESGCM.generate_key(bit_length=256)


def is_sealed(value: Any) -> TypeGuard[dict[str, Any]]:
    return isinstance(value, dict) and value.get("sealed") == ALGORITHM and "value" in value


def seal_fields(
    data: Mapping[str, Any], fields: Iterable[str], *, key: bytes, subject: str
) -> dict[str, Any]:
    """``data`` with each of ``fields`` present (and not null) sealed with ``key``."""
    sealed = dict(data)
    cipher = AESGCM(key)
    for name in fields:
        if sealed.get(name) is None:
            continue
        nonce = os.urandom(NONCE_BYTES)
        text = cipher.encrypt(nonce, dumps(sealed[name]), subject.encode())
        sealed[name] = {"sealed": ALGORITHM, "value": base64.b64encode(nonce + text).decode()}
    return sealed


def open_fields(
    data: Mapping[str, Any], fields: Iterable[str], *, key: bytes | None, subject: str
) -> dict[str, Any]:
    """``data`` with each sealed one of ``fields`` opened, or ``None`` where ``key`` is
    ``None`` (the subject was forgotten). A field that is sealed but does not open with the
    subject's key is a :class:`~riverbed.eventsourcing.errors.MessageError`."""
    opened = dict(data)
    for name in fields:
        value = opened.get(name)
        if not is_sealed(value):
            continue
        if key is None:
            opened[name] = None
            continue
        try:
            raw = base64.b64decode(value["value"], validate=True)
            plain = AESGCM(key).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], subject.encode())
            opened[name] = json.loads(plain)
        except (binascii.Error, InvalidTag, ValueError, TypeError):
            raise MessageError(
                f"field {name!r} does not open with the key of {subject!r}"
            ) from None
    return opened


@dataclass(slots=True)
class Keyring:
    """The subjects' keys, as the key topic holds them (last value per subject wins; a
    tombstone forgets)."""

    keys: dict[str, bytes] = field(default_factory=dict)

    def key_of(self, subject: str) -> bytes | None:
        return self.keys.get(subject)

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """One record of the key topic."""
        subject = _subject(key)
        if value is None:
            self.keys.pop(subject, None)
            return
        try:
            document = json.loads(value)
            self.keys[subject] = base64.b64decode(document["key"], validate=True)
        except (ValueError, TypeError, KeyError, binascii.Error):
            raise MessageError(f"the key record of {subject!r} holds no base64 key") from None

    @staticmethod
    def record(subject: str, key: bytes, *, created_ts: int) -> tuple[bytes, bytes]:
        """The key topic's record for ``subject``'s ``key``."""
        value = {
            "user_id": subject,
            "key": base64.b64encode(key).decode(),
            "created_ts": created_ts,
        }
        return dumps({"user_id": subject}), dumps(value)

    @staticmethod
    def tombstone(subject: str) -> tuple[bytes, None]:
        """The key topic's record that forgets ``subject``."""
        return dumps({"user_id": subject}), None


def _subject(key: bytes | None) -> str:
    try:
        subject = json.loads(key) if key is not None else None
        user = subject.get("user_id") if isinstance(subject, dict) else None
    except ValueError:
        user = None
    if not isinstance(user, str) or not user:
        raise MessageError(f'a key record whose key is not {{"user_id": ...}}: {key!r}')
    return user
