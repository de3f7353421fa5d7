"""COPY's text format (riverbed.cdc.snapshot): what a real PostgreSQL writes comes back as
exactly the values that were inserted, however the output is cut into writes."""

from __future__ import annotations

import io
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.cdc.envelope import Json
from riverbed.cdc.preflight import TableInfo
from riverbed.cdc.snapshot import CopyRows, copy_tables, parse_copy_line
from tests.support.capture import text_values

Row = list[bytes | None]

AWKWARD: list[str | None] = [
    "",
    None,
    "plain",
    "a\tb",
    "line one\nline two",
    "cr\rlf\r\n",
    "back\\slash",
    "trailing backslash\\",
    "\\N",  # the text of NULL's marker, as a value
    "\\.",  # COPY FROM's end-of-data marker, as a value
    "\\x41\\101\\t",  # escapes written out, not meant
    " ",
    "\b\f\v",
    "\x01\x1f\x7f",
    "NULL",
    "ünïcödé ✓ 𝄞 中文",
    "\t\n\\\r",
    "x" * 5_000,
]

# The text escapes of COPY TO (PostgreSQL's CopyAttributeOutText); every other character is
# written as it is. https://www.postgresql.org/docs/current/sql-copy.html, "Text Format".
_ESCAPES = {
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


def copy_text_line(values: list[str | None]) -> bytes:
    """One row as COPY TO writes it in text format (without the newline)."""
    fields = ["\\N" if v is None else "".join(_ESCAPES.get(c, c) for c in v) for v in values]
    return "\t".join(fields).encode()


def output_text(expression: str) -> str:
    """SQL for the text of ``expression``'s output function (NULL for NULL); not ``::text``,
    which differs for bool ('true', where the output function and COPY write 't')."""
    text = "CASE WHEN v IS NULL THEN NULL ELSE format('%s', v) END"
    return f"(SELECT {text} FROM (SELECT {expression} AS v) s)"


def encoded(values: list[str | None]) -> Row:
    return [None if v is None else v.encode() for v in values]


def copy_rows(cursor: Any, query: str) -> tuple[list[Row], CopyRows]:
    rows: list[Row] = []
    sink = CopyRows(rows.append)
    cursor.copy_expert(f"COPY ({query}) TO STDOUT", sink)
    sink.close()
    return rows, sink


@pytest.fixture(scope="module")
def awkward_table(sql: Any) -> str:
    sql.execute("DROP TABLE IF EXISTS copy_awkward")
    sql.execute("CREATE TABLE copy_awkward (id int PRIMARY KEY, a text, b text)")
    for i, a in enumerate(AWKWARD):
        b = AWKWARD[(i + 1) % len(AWKWARD)]
        sql.execute("INSERT INTO copy_awkward VALUES (%s, %s, %s)", (i, a, b))
    return "SELECT id, a, b FROM copy_awkward ORDER BY id"


@pytest.fixture(scope="module")
def awkward_output(sql: Any, awkward_table: str) -> bytes:
    """The bytes the server writes for the awkward table."""
    buffer = io.BytesIO()
    sql.copy_expert(f"COPY ({awkward_table}) TO STDOUT", buffer)
    return buffer.getvalue()


def awkward_expected() -> list[Row]:
    return [
        [str(i).encode(), *encoded([a, AWKWARD[(i + 1) % len(AWKWARD)]])]
        for i, a in enumerate(AWKWARD)
    ]


# -- against the server ----------------------------------------------------------------------


def test_awkward_text_values_come_back_exactly(sql: Any, awkward_table: str) -> None:
    rows, sink = copy_rows(sql, awkward_table)
    assert rows == awkward_expected()
    assert sink.rows == len(AWKWARD)


def test_other_types_come_back_in_their_text_form(sql: Any) -> None:
    # The snapshot's values must be each type's output-function text, as pgoutput sends it.
    expressions = [
        "(-9223372036854775808)::int8",
        "1.10::numeric(5,2)",
        "'NaN'::float8",
        "true",
        "'2026-03-04 05:06:07.891011+02'::timestamptz",
        "'\\x00015c09ff'::bytea",
        "ARRAY[1, NULL, 3]",
        "ARRAY['a b', 'c,d', 'e\"f', 'g\\h', '', NULL]",
        '\'{"k": "tab\\there\\nnew line", "n": [1, 2]}\'::jsonb',
        "'1 day 02:03:04'::interval",
        "'(1.5,-2)'::point",
        "NULL::int",
    ]
    listed = ", ".join(expressions)
    sql.execute(f"SELECT {', '.join(output_text(e) for e in expressions)}")
    texts = list(sql.fetchone())
    rows, _ = copy_rows(sql, f"SELECT {listed}")
    assert rows == [encoded(texts)]
    assert rows[0][5] == b"\\x00015c09ff"  # bytea's backslash survived COPY's escaping


@settings(max_examples=50, deadline=None)
@given(values=text_values())
def test_any_text_round_trips_through_the_server(sql: Any, values: list[str | None]) -> None:
    sql.execute("DROP TABLE IF EXISTS copy_generated; CREATE TABLE copy_generated (i int, v text)")
    for i, v in enumerate(values):
        sql.execute("INSERT INTO copy_generated VALUES (%s, %s)", (i, v))
    rows, _ = copy_rows(sql, "SELECT v FROM copy_generated ORDER BY i")
    assert rows == [[v] for v in encoded(values)]
    # One row of all of them too: the tabs between the columns.
    placeholders = ", ".join(["%s::text"] * len(values))
    rows, _ = copy_rows(sql, sql.mogrify(f"SELECT {placeholders}", values).decode())
    assert rows == [encoded(values)]


def test_copy_tables_reads_the_stored_columns_of_each_table(sql: Any) -> None:
    sql.execute("DROP TABLE IF EXISTS copy_columns")
    sql.execute(
        "CREATE TABLE copy_columns (id int PRIMARY KEY, gone text, note text, "
        "twice int GENERATED ALWAYS AS (id * 2) STORED, flag bool)"
    )
    sql.execute("ALTER TABLE copy_columns DROP COLUMN gone")
    sql.execute(
        "INSERT INTO copy_columns (id, note, flag) VALUES (1, 'a\tb', true), (2, NULL, NULL)"
    )
    table = TableInfo(
        schema="public", table="copy_columns", key_columns=("id",), replica_identity="d"
    )
    seen: list[tuple[str, dict[str, Json], bool]] = []
    said: list[str] = []
    total = copy_tables(
        sql,
        [table],
        lambda t, row, last: seen.append((t.table, row, last)),
        say=said.append,
        stopping=lambda: False,
    )
    assert total == 2
    # Dropped and generated columns are not in pgoutput's rows, so not in the snapshot's.
    # The last row of the last table is marked (Debezium's snapshot "last").
    assert sorted(seen, key=lambda s: s[1]["id"]) == [
        ("copy_columns", {"id": 1, "note": "a\tb", "flag": True}, False),
        ("copy_columns", {"id": 2, "note": None, "flag": None}, True),
    ]
    assert said == ["snapshot of public.copy_columns: 2 rows"]


# -- the parser alone ------------------------------------------------------------------------


def test_rows_cut_into_single_bytes_give_the_same_rows(awkward_output: bytes) -> None:
    rows: list[Row] = []
    sink = CopyRows(rows.append)
    for i in range(len(awkward_output)):
        assert sink.write(awkward_output[i : i + 1]) == 1
    sink.close()
    assert rows == awkward_expected()


@settings(max_examples=100, deadline=None)
@given(cuts=st.lists(st.integers(0, 10**6), max_size=20))
def test_rows_cut_anywhere_give_the_same_rows(awkward_output: bytes, cuts: list[int]) -> None:
    points = sorted({0, len(awkward_output), *(c % (len(awkward_output) + 1) for c in cuts)})
    rows: list[Row] = []
    sink = CopyRows(rows.append)
    for start, end in itertools.pairwise(points):
        sink.write(awkward_output[start:end])
    sink.close()
    assert rows == awkward_expected()
    assert sink.rows == len(AWKWARD)


def test_rows_are_delivered_as_soon_as_they_are_complete() -> None:
    rows: list[Row] = []
    sink = CopyRows(rows.append)
    sink.write(b"1\tab")
    assert rows == []
    sink.write(b"c\n2\t\\N\n3\t")
    assert rows == [[b"1", b"abc"], [b"2", None]]
    sink.write("ü\n")  # text writes are UTF-8
    assert rows[-1] == [b"3", "ü".encode()]
    sink.close()
    assert sink.rows == 3


def test_output_that_ends_inside_a_row_is_an_error() -> None:
    rows: list[Row] = []
    sink = CopyRows(rows.append)
    sink.write(b"1\tcomplete\n2\tcut sho")
    with pytest.raises(ValueError, match="inside a row"):
        sink.close()
    assert rows == [[b"1", b"complete"]]
    empty = CopyRows(rows.append)
    empty.close()  # no rows at all is fine
    assert empty.rows == 0


@settings(max_examples=300)
@given(values=st.lists(st.one_of(st.none(), st.text()), min_size=1, max_size=8))
def test_the_documented_escapes_round_trip(values: list[str | None]) -> None:
    assert parse_copy_line(copy_text_line(values)) == encoded(values)


@st.composite
def alternatively_escaped(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """A value and a field for it using the escapes COPY FROM also accepts: 1-3 octal digits,
    ``\\x`` with 1-2 hex digits, and a backslash before a character that needs none."""
    raw = draw(st.binary(max_size=20))
    out = []
    for i, byte in enumerate(raw):
        following = raw[i + 1 : i + 2]
        way = draw(st.sampled_from(["octal", "short octal", "hex", "short hex", "self"]))
        if way == "short octal" and byte < 8 and (not following or following not in b"01234567"):
            out.append(b"\\%o" % byte)  # one octal digit
        elif way == "hex":
            out.append(b"\\x%02x" % byte)
        elif (
            way == "short hex"
            and byte < 16
            and (not following or following not in b"0123456789abcdefABCDEF")
        ):
            out.append(b"\\x%x" % byte)  # one hex digit
        elif way == "self" and not (chr(byte).isalnum() or byte in b"\t\n\\\r\b\f\v"):
            out.append(b"\\" + bytes([byte]))  # e.g. "\\," for ","
        else:
            out.append(b"\\%03o" % byte)
    return raw, b"".join(out)


@settings(max_examples=200)
@given(case=alternatively_escaped())
def test_octal_hex_and_redundant_escapes_are_understood(case: tuple[bytes, bytes]) -> None:
    raw, field = case
    assert parse_copy_line(field + b"\t" + field) == [raw, raw]


def test_known_lines() -> None:
    assert parse_copy_line(b"") == [b""]
    assert parse_copy_line(b"\t") == [b"", b""]
    assert parse_copy_line(b"\\N\t\\\\N\tN") == [None, b"\\N", b"N"]
    assert parse_copy_line(b"\\101\\x42\\7\\q") == [b"AB\x07q"]
    assert parse_copy_line(b"\\b\\f\\n\\r\\t\\v\\\\") == [b"\b\f\n\r\t\v\\"]
