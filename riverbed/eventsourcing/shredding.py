"""Crypto-shredding: personal fields encrypted per subject, forgotten by deleting the keys.

Events are never changed, yet a user may ask to be forgotten. So an event's personal
fields (the carts' ``shipping_address``) are stored encrypted with a key of their subject
(the user), and the keys live in a compacted topic (``shop.keys``, key ``{"user_id"}``).
Forgetting the user writes a tombstone; compaction then removes the keys themselves from
the log, and from then on every reader, replay and backup of the events finds the field
unreadable and sees ``null``. The events stay, so versions, history and every other field
do too.

A sealed field is ``{"sealed": "A256GCM", "kid": KEY_ID, "value": BASE64}``: the value is a
12-byte random nonce followed by the AES-256-GCM ciphertext and tag of the field's JSON,
with the subject's id as associated data (a ciphertext moved to another user's event does
not open). Nonces are random: 2^32 encryptions under one key keep the chance of a repeat
below 2^-32 (NIST SP 800-38D, 8.3); one user's key seals far fewer.

**A subject's keys are a set.** Two processors may each make a first key for the same user
at once (the user's carts live in partitions they own), and a compacted topic keeps one
value per user. So a key record holds every key of its subject,
``{"user_id", "keys": {KEY_ID: BASE64}, "created_ts"}``, and whoever reads a record that
lacks a key it knows writes the union again (:meth:`Keyring.apply` says when). The set only
grows until a tombstone, which empties it; events name the key that sealed them, and
everyone seals with the smallest key id they know, so the set stays small. The keys topic
needs ``min.compaction.lag.ms`` well above the time a repair takes, so that compaction never
drops a record before its union is written.

Sans-IO: :class:`Keyring` is fed the key topic's records by whoever reads it.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from riverbed.eventsourcing.errors import MessageError
from riverbed.eventsourcing.messages import Event, dumps, loads

__all__ = [
    "ALGORITHM",
    "Keyring",
    "is_sealed",
    "new_key",
    "new_key_id",
    "open_fields",
    "opened",
    "seal_fields",
    "subject_of_key",
]

ALGORITHM = "A256GCM"
"""JOSE's name (RFC 7518) for AES-GCM with a 256-bit key."""

NONCE_BYTES = 12
"""GCM's recommended nonce size (NIST SP 800-38D, 5.2.1.1)."""


def new_key() -> bytes:
    """A fresh 256-bit key."""
    return AESGCM.generate_key(bit_length=256)


def new_key_id() -> str:
    """A fresh key id: 64 random bits, hex."""
    return secrets.token_hex(8)


def is_sealed(value: Any) -> TypeGuard[dict[str, Any]]:
    return (
        isinstance(value, dict)
        and value.get("sealed") == ALGORITHM
        and isinstance(value.get("kid"), str)
        and isinstance(value.get("value"), str)
    )


def seal_fields(
    data: Mapping[str, Any], fields: Iterable[str], *, key_id: str, key: bytes, subject: str
) -> dict[str, Any]:
    """``data`` with each of ``fields`` present (and not null) sealed with ``key``."""
    sealed = dict(data)
    cipher = AESGCM(key)
    for name in fields:
        if sealed.get(name) is None:
            continue
        nonce = os.urandom(NONCE_BYTES)
        text = cipher.encrypt(nonce, dumps(sealed[name]), subject.encode())
        value = base64.b64encode(nonce + text).decode()
        sealed[name] = {"sealed": ALGORITHM, "kid": key_id, "value": value}
    return sealed


def open_fields(
    data: Mapping[str, Any], fields: Iterable[str], *, keys: Mapping[str, bytes], subject: str
) -> dict[str, Any]:
    """``data`` with each sealed one of ``fields`` opened with the key it names among
    ``keys``, or ``None`` where that key is not there (the subject was forgotten). A field
    that does not open with its key is a
    :class:`~riverbed.eventsourcing.errors.MessageError`."""
    opened = dict(data)
    for name in fields:
        value = opened.get(name)
        if not is_sealed(value):
            continue
        key = keys.get(value["kid"])
        if key is None:
            opened[name] = None
            continue
        try:
            raw = base64.b64decode(value["value"], validate=True)
            plain = AESGCM(key).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], subject.encode())
            opened[name] = loads(plain)
        except (binascii.Error, InvalidTag, ValueError, TypeError):
            raise MessageError(
                f"field {name!r} does not open with the key of {subject!r}"
            ) from None
    return opened


def opened(event: Event, personal: Mapping[str, Iterable[str]], keyring: Keyring) -> Event:
    """``event`` with its personal fields (``personal``: event type -> fields) opened with
    its subject's keys in ``keyring`` (``None`` for a forgotten subject)."""
    fields = personal.get(event.type, ())
    if not fields or event.user_id is None:
        return event
    keys = keyring.keys_of(event.user_id)
    data = open_fields(event.data, fields, keys=keys, subject=event.user_id)
    return dataclasses.replace(event, data=data)


@dataclass(slots=True)
class Keyring:
    """The subjects' key sets, as the key topic holds them (see the module docstring)."""

    keys: dict[str, dict[str, bytes]] = field(default_factory=dict)

    def keys_of(self, subject: str) -> Mapping[str, bytes]:
        """``subject``'s keys by id (empty once forgotten, or before its first key)."""
        return self.keys.get(subject, {})

    def sealing_key(self, subject: str) -> tuple[str, bytes] | None:
        """The key to seal ``subject``'s fields with: the one of the smallest id."""
        keys = self.keys.get(subject)
        if not keys:
            return None
        key_id = min(keys)
        return key_id, keys[key_id]

    def add(self, subject: str, key_id: str, key: bytes) -> None:
        self.keys.setdefault(subject, {})[key_id] = key

    def apply(self, key: bytes | None, value: bytes | None) -> bool:
        """One record of the key topic, in log order. True if it lacks a key this keyring
        holds for its subject: then :meth:`record` must be written again (the union)."""
        subject = subject_of_key(key)
        if value is None:
            self.keys.pop(subject, None)
            return False
        try:
            document = json.loads(value)
            received = {
                str(key_id): base64.b64decode(text, validate=True)
                for key_id, text in document["keys"].items()
            }
        except (ValueError, TypeError, KeyError, AttributeError, binascii.Error):
            raise MessageError(f"the key record of {subject!r} holds no base64 keys") from None
        known = self.keys.setdefault(subject, {})
        stale = not known.keys() <= received.keys()
        known.update(received)
        return stale

    def record(self, subject: str, *, created_ts: int) -> tuple[bytes, bytes]:
        """The key topic's record of all of ``subject``'s keys."""
        keys = {k: base64.b64encode(v).decode() for k, v in sorted(self.keys_of(subject).items())}
        value = {"user_id": subject, "keys": keys, "created_ts": created_ts}
        return dumps({"user_id": subject}), dumps(value)

    @staticmethod
    def tombstone(subject: str) -> tuple[bytes, None]:
        """The key topic's record that forgets ``subject``."""
        return dumps({"user_id": subject}), None


def subject_of_key(key: bytes | None) -> str:
    """The subject a key record's key ``{"user_id"}`` names."""
    try:
        subject = json.loads(key) if key is not None else None
        user = subject.get("user_id") if isinstance(subject, dict) else None
    except ValueError:
        user = None
    if not isinstance(user, str) or not user:
        raise MessageError(f'a key record whose key is not {{"user_id": ...}}: {key!r}')
    return user
