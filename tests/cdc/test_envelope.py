"""Debezium's envelope and column values (riverbed.cdc.envelope), and what a real server's
text forms turn into."""

from __future__ import annotations

import json

import psycopg2
import pytest

from riverbed.cdc.envelope import (
    BOOL,
    FLOAT8,
    INT4,
    INT8,
    NUMERIC,
    TIMESTAMP,
    TIMESTAMPTZ,
    UNAVAILABLE_VALUE,
    Source,
    change_event,
    column_value,
    key_of,
    row_of,
)
from riverbed.cdc.pgoutput import Column, Unchanged
from riverbed.testing.postgres import PostgresCluster

COLUMNS = (
    Column(name="id", type_oid=INT4, type_modifier=-1, is_key=True),
    Column(name="note", type_oid=25, type_modifier=-1, is_key=False),
    Column(name="big", type_oid=25, type_modifier=-1, is_key=False),
)


@pytest.mark.parametrize(
    ("raw", "type_oid", "expected"),
    [
        (None, INT4, None),
        (b"t", BOOL, True),
        (b"f", BOOL, False),
        (b"-9223372036854775808", INT8, -(2**63)),
        (b"12345678901234567890.000000000001", NUMERIC, "12345678901234567890.000000000001"),
        (b"2.5", FLOAT8, 2.5),
        (b"NaN", FLOAT8, "NaN"),
        (b"2026-01-01 12:00:00.123+00", TIMESTAMPTZ, "2026-01-01T12:00:00.123000Z"),
        (b"2026-01-01 14:00:00+02", TIMESTAMPTZ, "2026-01-01T12:00:00.000000Z"),
        (b"2026-01-01 12:00:00.123456", TIMESTAMP, "2026-01-01T12:00:00.123456Z"),
        (b"infinity", TIMESTAMPTZ, "infinity"),
        ("Zoë".encode(), 25, "Zoë"),
    ],
)
def test_column_values(raw: bytes | None, type_oid: int, expected: object) -> None:
    assert column_value(raw, type_oid) == expected


def test_the_server_s_text_forms_become_the_contract_s_json(postgres: PostgresCluster) -> None:
    connection = psycopg2.connect(postgres.dsn, options="-c TimeZone=UTC")
    try:
        cursor = connection.cursor()
        cursor.execute(
            "SELECT true::text, 42::int8::text, 1.10::numeric(5,2)::text, "
            "'2026-03-04 05:06:07.891011+02'::timestamptz::text, "
            "'2026-03-04 05:06:07'::timestamp::text"
        )
        texts = [t.encode() for t in cursor.fetchone()]
    finally:
        connection.close()
    types = [BOOL, INT8, NUMERIC, TIMESTAMPTZ, TIMESTAMP]
    assert [column_value(t, oid) for t, oid in zip(texts, types, strict=True)] == [
        True,
        42,
        "1.10",
        "2026-03-04T03:06:07.891011Z",
        "2026-03-04T05:06:07.000000Z",
    ]


def test_unchanged_toast_values_come_from_the_old_row_or_are_the_placeholder() -> None:
    new = (b"1", b"n", Unchanged.TOAST)
    assert row_of(COLUMNS, new) == {"id": 1, "note": "n", "big": UNAVAILABLE_VALUE}
    full_old = (b"1", b"o", b"huge")
    assert row_of(COLUMNS, new, old=full_old) == {"id": 1, "note": "n", "big": "huge"}
    with pytest.raises(ValueError, match="2 values for 3 columns"):
        row_of(COLUMNS, (b"1", b"n"))


def test_the_envelope_has_debezium_s_fields() -> None:
    source = Source(
        name="shop",
        db="postgres",
        schema="public",
        table="users",
        tx_id=750,
        lsn=24023128,
        commit_lsn=24023300,
        commit_ts_ms=1_767_225_600_123,
    )
    after = row_of(COLUMNS, (b"7", None, b"x"))
    event = change_event(op="c", before=None, after=after, source=source, ts_ms=1_767_225_600_200)
    assert json.loads(json.dumps(event)) == {
        "before": None,
        "after": {"id": 7, "note": None, "big": "x"},
        "source": {
            "version": "riverbed",
            "connector": "postgresql",
            "name": "shop",
            "ts_ms": 1_767_225_600_123,
            "snapshot": "false",
            "db": "postgres",
            "schema": "public",
            "table": "users",
            "txId": 750,
            "lsn": 24023128,
            "commitLsn": 24023300,
        },
        "op": "c",
        "ts_ms": 1_767_225_600_200,
    }
    assert key_of(after, ["id"]) == {"id": 7}
    with pytest.raises(ValueError, match="unknown op"):
        change_event(op="x", before=None, after=None, source=source, ts_ms=0)
