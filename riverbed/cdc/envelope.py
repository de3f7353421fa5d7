"""Debezium's change-event envelope, built from decoded pgoutput rows (pure functions).

The contract (DESIGN.md, "Topics, formats and time"): the key is a JSON object of the
primary-key columns; the value is Debezium's envelope with schemas disabled::

    {"before": {...} | null, "after": {...} | null, "op": "c" | "u" | "d" | "r" | "t",
     "ts_ms": <when riverbed produced it>,
     "source": {"version", "connector": "postgresql", "name": <prefix>, "db", "schema",
                "table", "txId", "lsn", "commitLsn", "ts_ms": <commit time>, "snapshot"}}

and each delete is followed by a tombstone (the same key, a null value). Column values, as
JSON: integers as numbers, ``numeric`` as strings (exact), booleans as booleans,
``timestamptz`` / ``timestamp`` as ISO-8601 in UTC with microseconds
(``2026-01-01T12:00:00.123456Z``; a ``timestamp`` without time zone is taken as UTC),
``float4`` / ``float8`` as numbers (NaN and infinities as the strings PostgreSQL prints),
anything else as its PostgreSQL text form. The capture sets ``TimeZone=UTC`` on its
connections, so the server prints times with ``+00``.

Large values (TOAST): an UPDATE that leaves a TOASTed column unchanged does not send it.
riverbed's rule: the value comes from the old row when the server sent one (REPLICA
IDENTITY FULL); otherwise the column holds Debezium's placeholder
:data:`UNAVAILABLE_VALUE`, so consumers that follow Debezium's convention keep their
previous value. ``before`` is the old row with FULL, the old key columns when the key
changed, and null otherwise (Debezium's behaviour under REPLICA IDENTITY DEFAULT).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from riverbed.cdc.pgoutput import Column, TupleValue, Unchanged

__all__ = [
    "UNAVAILABLE_VALUE",
    "Source",
    "change_event",
    "column_value",
    "converter",
    "key_of",
    "row_converter",
    "row_of",
]

UNAVAILABLE_VALUE = "__debezium_unavailable_value"
"""Debezium's ``unavailable.value.placeholder`` default."""

# PostgreSQL's built-in type oids (pg_type.oid, fixed across versions).
BOOL, INT8, INT2, INT4, OID = 16, 20, 21, 23, 26
FLOAT4, FLOAT8, NUMERIC = 700, 701, 1700
TIMESTAMP, TIMESTAMPTZ = 1114, 1184
_INTEGERS = frozenset({INT8, INT2, INT4, OID})
_FLOATS = frozenset({FLOAT4, FLOAT8})

Json = Any
"""A JSON value (what json.dumps accepts)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """Where a change came from: Debezium's ``source`` block."""

    name: str
    """The topic prefix (Debezium's ``topic.prefix``, formerly the server name)."""
    db: str
    schema: str
    table: str
    tx_id: int | None
    lsn: int | None
    commit_lsn: int | None
    """The commit's position: per row, (commit_lsn, lsn) grows with every change."""
    commit_ts_ms: int
    snapshot: str = "false"
    """"true" for rows of the initial snapshot, "last" for its last row, else "false"."""
    version: str = "riverbed"

    def as_json(self) -> dict[str, Json]:
        return {
            "version": self.version,
            "connector": "postgresql",
            "name": self.name,
            "ts_ms": self.commit_ts_ms,
            "snapshot": self.snapshot,
            "db": self.db,
            "schema": self.schema,
            "table": self.table,
            "txId": self.tx_id,
            "lsn": self.lsn,
            "commitLsn": self.commit_lsn,
        }


def column_value(raw: bytes | None, type_oid: int) -> Json:
    """One column's text form (as pgoutput sends it) as its JSON value (module docstring)."""
    return None if raw is None else converter(type_oid)(raw)


def converter(type_oid: int) -> Callable[[bytes], Json]:
    """The function that turns a (non-NULL) text form of this type into its JSON value."""
    if type_oid == BOOL:
        return _bool  # boolout's form, and the bool-to-text cast's
    if type_oid in _INTEGERS:
        return int
    if type_oid in _FLOATS:
        return _float
    if type_oid in (TIMESTAMP, TIMESTAMPTZ):
        return _timestamp
    return _text  # numeric stays exact as a string; every other type in its text form


def _bool(raw: bytes) -> bool:
    return raw in (b"t", b"true")


def _float(raw: bytes) -> Json:
    number = float(raw)
    return raw.decode() if math.isnan(number) or math.isinf(number) else number


def _timestamp(raw: bytes) -> str:
    return _iso_utc(raw.decode())


def _text(raw: bytes) -> str:
    return raw.decode()


def row_converter(columns: Sequence[Column]) -> Callable[[Sequence[bytes | None]], dict[str, Json]]:
    """A fast :func:`row_of` for rows without unchanged TOAST values (snapshot rows)."""
    pairs = [(column.name, converter(column.type_oid)) for column in columns]

    def convert(values: Sequence[bytes | None]) -> dict[str, Json]:
        if len(values) != len(pairs):
            raise ValueError(f"{len(values)} values for {len(pairs)} columns")
        return {
            name: None if raw is None else convert_one(raw)
            for (name, convert_one), raw in zip(pairs, values, strict=True)
        }

    return convert


def _iso_utc(text: str) -> str:
    """PostgreSQL's ``2026-01-01 12:00:00.5+00`` (or without a zone) as
    ``2026-01-01T12:00:00.500000Z``; ``infinity`` and ``-infinity`` as they are."""
    if text in ("infinity", "-infinity"):
        return text
    value = datetime.datetime.fromisoformat(text)
    if value.tzinfo is not None:
        value = value.astimezone(datetime.UTC).replace(tzinfo=None)
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def row_of(
    columns: Sequence[Column],
    values: Sequence[TupleValue],
    *,
    old: Sequence[TupleValue] | None = None,
) -> dict[str, Json]:
    """A row as a JSON object; unchanged TOAST values from ``old`` (if it has them), else
    the placeholder."""
    if len(values) != len(columns):
        raise ValueError(f"{len(values)} values for {len(columns)} columns")
    row: dict[str, Json] = {}
    for i, (column, value) in enumerate(zip(columns, values, strict=True)):
        if value is Unchanged.TOAST:
            previous = old[i] if old is not None and i < len(old) else Unchanged.TOAST
            if previous is Unchanged.TOAST:
                row[column.name] = UNAVAILABLE_VALUE
                continue
            value = previous
        assert not isinstance(value, Unchanged)
        row[column.name] = column_value(value, column.type_oid)
    return row


def key_of(row: Mapping[str, Json], key_columns: Sequence[str]) -> dict[str, Json]:
    """The message key: the primary-key columns of ``row``, in key order."""
    return {name: row[name] for name in key_columns}


def change_event(
    *,
    op: str,
    before: Mapping[str, Json] | None,
    after: Mapping[str, Json] | None,
    source: Source,
    ts_ms: int,
) -> dict[str, Json]:
    """The envelope of one change (``op``: c, u, d, r or t)."""
    if op not in ("c", "u", "d", "r", "t"):
        raise ValueError(f"unknown op {op!r}")
    return {
        "before": None if before is None else dict(before),
        "after": None if after is None else dict(after),
        "source": source.as_json(),
        "op": op,
        "ts_ms": ts_ms,
    }
