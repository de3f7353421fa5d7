"""The initial snapshot: a table's rows read with ``COPY ... TO STDOUT``, as column texts.

The capture reads every table in one ``REPEATABLE READ`` transaction that imported the
snapshot the replication slot exported when it was created, so the rows are exactly the
state at the slot's consistent point: every later change is streamed from the slot,
nothing is missed or seen twice.

``COPY``'s text format is the fastest way out of PostgreSQL and gives each value in its
output-function form, the same form pgoutput streams, so snapshot rows and streamed rows go
through the same conversion (:mod:`riverbed.cdc.envelope`). The format: one row per line,
columns separated by tabs, ``\\N`` for NULL, and backslash escapes for backslash, tab,
newline, carriage return, backspace, form feed and vertical tab (PostgreSQL's
``CopyAttributeOutText``; octal and hex escapes are accepted too).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from riverbed.cdc.changes import SnapshotRecords
from riverbed.cdc.envelope import Json, row_converter
from riverbed.cdc.metrics import CaptureMetrics
from riverbed.cdc.pgoutput import Column
from riverbed.cdc.preflight import TableInfo, identifier, quoted_name
from riverbed.cdc.publisher import Publisher

__all__ = [
    "CopyRows",
    "copy_query",
    "copy_tables",
    "parse_copy_line",
    "snapshot_tables",
    "table_columns",
]

_ESCAPE = re.compile(rb"\\(?:([0-7]{1,3})|x([0-9a-fA-F]{1,2})|(.))", re.DOTALL)
_SIMPLE = {b"b": b"\b", b"f": b"\f", b"n": b"\n", b"r": b"\r", b"t": b"\t", b"v": b"\v"}


def _unescape_one(match: re.Match[bytes]) -> bytes:
    octal, hexadecimal, char = match.groups()
    if octal is not None:
        return bytes([int(octal, 8) & 0xFF])
    if hexadecimal is not None:
        return bytes([int(hexadecimal, 16)])
    return _SIMPLE.get(char, char)


def parse_copy_line(line: bytes) -> list[bytes | None]:
    """One line of COPY's text format (without its newline) as column texts."""
    values: list[bytes | None] = []
    for field in line.split(b"\t"):
        if field == b"\\N":
            values.append(None)
        elif b"\\" in field:
            values.append(_ESCAPE.sub(_unescape_one, field))
        else:
            values.append(field)
    return values


class CopyRows:
    """A file-like sink for ``cursor.copy_expert``: calls ``on_row`` for every complete row."""

    def __init__(self, on_row: Callable[[list[bytes | None]], None]) -> None:
        self._on_row = on_row
        self._partial = b""
        self.rows = 0

    def write(self, data: bytes | str) -> int:
        chunk = data.encode() if isinstance(data, str) else bytes(data)
        text = self._partial + chunk
        *lines, self._partial = text.split(b"\n")
        for line in lines:
            self._on_row(parse_copy_line(line))
            self.rows += 1
        return len(chunk)

    def close(self) -> None:
        if self._partial:
            raise ValueError("COPY output ended inside a row")


def copy_tables(
    cursor: Any,
    tables: Sequence[TableInfo],
    on_row: Callable[[TableInfo, dict[str, Json], bool], None],
    *,
    say: Callable[[str], None],
    stopping: Callable[[], bool],
    table_done: Callable[[], None] = lambda: None,
) -> int | None:
    """Read every table with COPY (in the cursor's transaction), calling ``on_row(table, row,
    last)`` for each row, ``last`` true for the very last one (Debezium's ``snapshot:
    "last"``), and ``table_done()`` after each table; the number of rows, or None when
    stopped before the end."""
    total = 0
    held: list[tuple[TableInfo, dict[str, Json]]] = []  # one row behind, to know the last
    for table in tables:
        columns = table_columns(cursor, table)

        converter = row_converter(columns)

        def row(
            values: list[bytes | None],
            t: TableInfo = table,
            convert: Callable[[Sequence[bytes | None]], dict[str, Json]] = converter,
        ) -> None:
            if held:
                on_row(*held.pop(), False)
            held.append((t, convert(values)))

        sink = CopyRows(row)
        cursor.copy_expert(copy_query(table, columns), sink)
        sink.close()
        total += sink.rows
        table_done()
        say(f"snapshot of {table.qualified}: {sink.rows} rows")
        if stopping():
            say("stopped during the snapshot: the next run starts it over")
            return None
    if held:
        on_row(*held.pop(), True)
    return total


def snapshot_tables(
    cursor: Any,
    tables: Sequence[TableInfo],
    publisher: Publisher,
    *,
    prefix: str,
    db: str,
    lsn: int,
    tx_id: int | None,
    say: Callable[[str], None],
    stopping: Callable[[], bool],
    metrics: CaptureMetrics,
) -> int | None:
    """Produce every row of ``tables`` as an op ``r`` record (:func:`copy_tables`)."""
    encoders: dict[str, SnapshotRecords] = {}
    produced = 0

    def on_row(table: TableInfo, row: dict[str, Json], last: bool) -> None:
        nonlocal produced
        encoder = encoders.get(table.qualified)
        if encoder is None:
            encoder = SnapshotRecords(prefix=prefix, db=db, table=table, lsn=lsn, tx_id=tx_id)
            encoders[table.qualified] = encoder
        publisher.send(encoder.record(row, last=last, now_ms=int(time.time() * 1000)))
        metrics.snapshot_rows.inc()
        produced += 1
        if produced % 512 == 0:
            publisher.poll(0)

    metrics.snapshot_started(len(tables))
    try:
        return copy_tables(
            cursor,
            tables,
            on_row,
            say=say,
            stopping=stopping,
            table_done=metrics.snapshot_tables_done.inc,
        )
    finally:
        metrics.snapshot_ended()


def table_columns(cursor: Any, table: TableInfo) -> list[Column]:
    """The table's columns as pgoutput describes them: stored (not generated) ones, in order."""
    cursor.execute(
        "SELECT a.attname, a.atttypid, a.atttypmod FROM pg_attribute a "
        "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped "
        "AND a.attgenerated = '' ORDER BY a.attnum",
        (quoted_name(table),),
    )
    rows: Sequence[tuple[str, int, int]] = cursor.fetchall()
    return [
        Column(name=name, type_oid=oid, type_modifier=modifier, is_key=name in table.key_columns)
        for name, oid, modifier in rows
    ]


def copy_query(table: TableInfo, columns: Sequence[Column]) -> str:
    listed = ", ".join(identifier(c.name) for c in columns)
    return f"COPY (SELECT {listed} FROM {quoted_name(table)}) TO STDOUT"
