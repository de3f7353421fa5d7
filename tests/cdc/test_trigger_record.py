"""PostgreSQL's composite text, ``row(t.*)::text`` (riverbed.cdc.trigger.parse_record),
against what a real server writes: each field is the column's output-function text."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.cdc.envelope import Json
from riverbed.cdc.preflight import TableInfo
from riverbed.cdc.snapshot import copy_tables
from riverbed.cdc.trigger import TriggerCaptureConfig, _Drain, parse_record
from riverbed.testing.postgres import PostgresCluster
from tests.support.capture import text_values

AWKWARD: list[str | None] = [
    "plain",
    "",
    None,
    " ",
    "\t",
    "two words",
    '"quoted"',
    '""',
    '"',
    "a,b",
    ",",
    "back\\slash",
    "\\",
    '\\"',
    "(paren)",
    "(",
    ")",
    "()",
    "line one\nline two",
    "cr\r",
    "NULL",
    "ünïcödé ✓ 𝄞",
    "{1,2}",
    "x" * 3_000,
]

COLUMNS = ["id", "t", "arr", "texts", "doc", "flag", "at", "amount", "raw", "pair"]


@pytest.fixture(scope="module")
def sql(postgres: PostgresCluster) -> Iterator[Any]:
    connection = psycopg2.connect(postgres.dsn, options="-c TimeZone=UTC -c DateStyle=ISO")
    connection.autocommit = True
    try:
        yield connection.cursor()
    finally:
        connection.close()


def output_texts(sql: Any, table: str, columns: list[str]) -> list[tuple[str, list[str | None]]]:
    """``row(t.*)::text`` and each column's output-function text (NULL: None), per row.

    ``format('%s', c)`` rather than ``c::text``: the bool-to-text cast says 'true' where the
    output function, and so the record's text, says 't'."""
    listed = ", ".join(
        f"CASE WHEN t.{c} IS NULL THEN NULL ELSE format('%s', t.{c}) END" for c in columns
    )
    sql.execute(f"SELECT row(t.*)::text, {listed} FROM {table} t ORDER BY t.id")
    return [(row[0], list(row[1:])) for row in sql.fetchall()]


def test_awkward_values_come_back_as_their_column_texts(sql: Any) -> None:
    sql.execute("DROP TABLE IF EXISTS record_awkward")
    sql.execute(
        "CREATE TABLE record_awkward (id int PRIMARY KEY, t text, arr int[], texts text[], "
        "doc jsonb, flag bool, at timestamptz, amount numeric, raw bytea, pair point)"
    )
    for i, text in enumerate(AWKWARD):
        sql.execute(
            "INSERT INTO record_awkward VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                i,
                text,
                [1, 2] if i % 3 else None,
                None if i % 4 == 1 else [text, "a,b", None, ""],
                None if i % 5 == 2 else '{"a": "x,\\"y\\"(z)\\\\", "b": [1, 2], "c": null}',
                [True, False, None][i % 3],
                "2026-01-02 03:04:05.678+02",
                "-12.3400",
                psycopg2.Binary(b"\x00\\\x01\xff"),
                "(1.5,-2)",
            ),
        )
    rows = output_texts(sql, "record_awkward", COLUMNS)
    assert len(rows) == len(AWKWARD)
    for (record, columns), text in zip(rows, AWKWARD, strict=True):
        assert columns[1] == text  # the value went in and came out as inserted
        assert parse_record(record) == columns, record


def test_empty_strings_are_not_nulls() -> None:
    assert parse_record('(,"",," ",)') == [None, "", None, " ", None]
    assert parse_record("()") == [None]  # one NULL column
    assert parse_record('("")') == [""]
    assert parse_record('(1,"a""b","c\\\\d",e)') == ["1", 'a"b', "c\\d", "e"]


def test_what_is_not_a_record_is_an_error() -> None:
    for text in ["", "(", ")", "1,2", "[1,2]", "(1,2"]:
        with pytest.raises(ValueError):
            parse_record(text)


@settings(max_examples=50, deadline=None)
@given(values=text_values(st.sampled_from(['"', "\\", ",", "(", ")", " ", "", '""', "\\\\"])))
def test_any_text_round_trips_through_the_server(sql: Any, values: list[str | None]) -> None:
    placeholders = ", ".join(["%s::text"] * len(values))
    sql.execute(f"SELECT row({placeholders})::text", values)
    (record,) = sql.fetchone()
    assert parse_record(record) == values


def test_a_record_cut_inside_quotes_is_a_value_error() -> None:
    # Like the other malformed texts above: the parser's error, not an IndexError.
    for text in ['("abc)', '("a\\)', '(x,")']:
        with pytest.raises(ValueError):
            parse_record(text)


def test_trigger_changes_have_the_same_columns_as_the_snapshot(sql: Any) -> None:
    # riverbed.cdc.trigger's docstring: the trigger's rows are "exactly what pgoutput sends,
    # so both methods give identical JSON". pgoutput and the snapshot (copy_tables) leave
    # out generated columns; row(NEW.*) has them, and so would every drained change.
    sql.execute("DROP TABLE IF EXISTS record_generated")
    sql.execute(
        "CREATE TABLE record_generated (id int PRIMARY KEY, note text, "
        "twice int GENERATED ALWAYS AS (id * 2) STORED)"
    )
    sql.execute("INSERT INTO record_generated (id, note) VALUES (1, 'a')")
    table = TableInfo(
        schema="public", table="record_generated", key_columns=("id",), replica_identity="d"
    )
    snapshot: list[dict[str, Json]] = []
    said: list[str] = []
    copy_tables(
        sql, [table], lambda _, row, last: snapshot.append(row), say=said.append, stopping=bool
    )
    sql.execute("SELECT row(t.*)::text, clock_timestamp() FROM record_generated t")
    new_row, at = sql.fetchone()
    config = TriggerCaptureConfig(dsn="", bootstrap="", prefix="shop", tables=(), name="audit")
    drain = _Drain(config, "postgres", {("public", "record_generated"): table})
    audit_row = (1, "1000", "public", "record_generated", "c", None, new_row, at)
    [record] = drain.records(sql, [audit_row])
    assert record.value is not None
    assert json.loads(record.value)["after"] == snapshot[0] == {"id": 1, "note": "a"}
