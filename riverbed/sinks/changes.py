"""A changelog record as a change to a store's row: the one reading every sink shares.

Two kinds of input topic (DESIGN.md, "Derived data"):

- **CDC topics** ``PREFIX.SCHEMA.TABLE``: the value is Debezium's envelope (schemas
  disabled). ``after`` is the row; an op ``d`` (or the tombstone after it) removes the key;
  an op ``t`` (truncate) empties the table. The row's collection is the table (the topic's
  last part), its id the primary-key values of the record's key, in the key's
  order, joined with ``:``. A column holding Debezium's placeholder for an unchanged TOAST
  value (:data:`UNAVAILABLE_VALUE`) is left out of the row and listed in
  :attr:`Change.unavailable`: a store keeps the value it has.
- **riverbed changelogs** ``T`` (pipeline outputs, the carts' state): the last value per
  key; a null value removes the key. The collection is ``T``, the id the key's JSON text as
  it is on the record (bytes-equal keys are the same key, as for compaction).

A tombstone (null value) removes the key. It is read as a CDC one (the tombstone after a
delete: the delete removed the row already, and a compacted topic may keep only the
tombstone) when it carries riverbed's capture header (:data:`CDC_HEADER`) or its topic is
known to be a CDC topic, else as a changelog's.

A record that fits neither (no key, a key or value that is not a JSON object) is a
:class:`NotAChangelog`: the sink stops before applying the batch holding it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, NamedTuple

import orjson

__all__ = [
    "CDC_HEADER",
    "UNAVAILABLE_VALUE",
    "Change",
    "NotAChangelog",
    "SinkError",
    "change_of",
    "collection_of_topic",
    "row_id_of",
]

UNAVAILABLE_VALUE = "__debezium_unavailable_value"
"""Debezium's ``unavailable.value.placeholder`` default, as riverbed's capture writes it."""

CDC_HEADER = "riverbed.cdc.position"
"""The header riverbed's capture puts on each of its records, tombstones included."""

_ENVELOPE = frozenset({"before", "after", "op", "source"})


class SinkError(Exception):
    """A sink cannot go on: a store or broker it cannot reach, an input it cannot read.
    Its message is one line for the user."""


class NotAChangelog(SinkError):
    """A record that is neither a CDC change nor a changelog entry."""


class Change(NamedTuple):
    """One change to a store: ``row`` is the row's new value, or None to remove it. (A named
    tuple: every record of a sink's input becomes one, and it is made in a third of a frozen
    dataclass's time.)"""

    topic: str
    collection: str
    """The table (CDC: the source table) or changelog topic the row belongs to."""
    row_id: str
    """The row's id within its collection (module docstring)."""
    row: dict[str, Any] | None
    key: dict[str, Any]
    """The record's key object (CDC: the primary-key columns)."""
    unavailable: tuple[str, ...] = ()
    """Columns whose value did not come with the change (unchanged TOAST values)."""
    truncate: bool = False
    """The whole collection is emptied (CDC op ``t``); ``row_id`` is empty."""
    cdc: bool = False


@functools.cache
def collection_of_topic(topic: str) -> str:
    """A topic's last dot-separated part: ``shop.public.users`` -> ``users``."""
    return topic.rsplit(".", 1)[-1]


def change_of(topic: str, key: bytes | None, value: bytes | None, *, cdc: bool) -> Change:
    """The change a record holds (``cdc``: the topic is known to be a CDC topic, or the
    record carries :data:`CDC_HEADER`); a :class:`NotAChangelog` for a record that is not
    a change."""
    if key is None:
        raise NotAChangelog(f"{topic}: a record without a key is not a changelog entry")
    key_object = _object(topic, key, "key")
    if value is None:
        if cdc:
            return Change(topic, collection_of_topic(topic), row_id_of(key_object), None,
                          key_object, cdc=True)  # fmt: skip
        return Change(topic, topic, key.decode(), None, key_object)
    document = _object(topic, value, "value")
    if document.keys() >= _ENVELOPE:
        return _cdc_change(topic, key_object, document)
    return Change(topic, topic, key.decode(), document, key_object)


def _cdc_change(topic: str, key: dict[str, Any], envelope: Mapping[str, Any]) -> Change:
    collection = collection_of_topic(topic)
    op = envelope["op"]
    if op == "t":
        return Change(topic, collection, "", None, {}, truncate=True, cdc=True)
    row_id = row_id_of(key)
    if op == "d":
        return Change(topic, collection, row_id, None, key, cdc=True)
    after = envelope["after"]
    if op not in ("c", "u", "r") or not isinstance(after, dict):
        raise NotAChangelog(f"{topic}: a change envelope with op {op!r} and no row after it")
    if UNAVAILABLE_VALUE not in after.values():
        return Change(topic, collection, row_id, after, key, (), False, True)  # positional: fast
    unavailable = tuple(k for k, v in after.items() if v == UNAVAILABLE_VALUE)
    after = {k: v for k, v in after.items() if v != UNAVAILABLE_VALUE}
    return Change(topic, collection, row_id, after, key, unavailable=unavailable, cdc=True)


def row_id_of(key: Mapping[str, Any]) -> str:
    """The primary-key values in the key's order, joined with ``:`` (strings as they are,
    other values as their JSON text)."""
    if len(key) == 1:
        (value,) = key.values()
        return value if type(value) is str else orjson.dumps(value).decode()
    return ":".join(v if type(v) is str else orjson.dumps(v).decode() for v in key.values())


def _object(topic: str, data: bytes, what: str) -> dict[str, Any]:
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise NotAChangelog(f"{topic}: a record whose {what} is not JSON") from None
    if not isinstance(document, dict):
        raise NotAChangelog(f"{topic}: a record whose {what} is not a JSON object")
    return document
