"""Kafka record values parsed as JSON objects into Arrow columns in a Python worker, with the
rules of Spark's ``from_json`` (what :func:`~riverbed.pipelines.operators.inputs.json_events`
does in the JVM), so that a pipeline whose first Python step wants the events anyway can
parse them there instead: :func:`parse_json_objects`.

**Two paths, one result.** Most records go through pyarrow's JSON reader, many at once:
the values are joined with newlines and read with the schema given. A value takes that path
only if it starts with ``{``, ends with ``}`` and has no byte below 0x20 (no newline inside
that could split it; pyarrow also crashes the process on some values that are not objects,
such as ``null`` first in its input). When pyarrow refuses a run of values (one is not
valid JSON or not UTF-8, a field has another type, a key is repeated) or makes more rows
than values, the run is halved until the values it refuses are found, and those, with the
values that never qualified, are parsed one by one in Python (:func:`parse_one`), with
``from_json``'s rules:

- a value that is null, empty or not a JSON object gives a row of nulls; text after the
  first object is ignored, as Jackson does; invalid UTF-8 becomes U+FFFD, as Spark's cast
  of the bytes to a string makes it;
- a ``long`` field takes a JSON integer in range, anything else is null; the other fields
  of the record keep their values;
- a ``string`` field takes a string, or the JSON text of any other value (``5``,
  ``true``, ``{"a":1}``), floats written as Java does (``1.0E20``), as Spark does.

Known differences from Spark, for values no producer of events writes: single-quoted JSON
(Spark accepts it, here the record is nulls), and floats inside an object or array given to
a string field (written as Python writes them).

Only ``string`` and ``long`` fields are supported, what the contract's events use.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

__all__ = ["arrow_schema", "fields_of", "parse_json_objects", "parse_one"]

_KINDS = {pa.string(): "string", pa.int64(): "long"}
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_WHITESPACE = " \t\n\r"
_DECODER = json.JSONDecoder()
_NEWLINE, _EMPTY = pa.scalar(b"\n", pa.binary()), pa.scalar(b"", pa.binary())


def arrow_schema(fields: Sequence[tuple[str, str]]) -> pa.Schema:
    """The Arrow schema of ``(name, kind)`` pairs, kind ``"string"`` or ``"long"``."""
    types = {kind: type_ for type_, kind in _KINDS.items()}
    unknown = sorted({kind for _, kind in fields} - types.keys())
    if unknown:
        raise ValueError(f"unsupported field types {unknown}: only string and long")
    return pa.schema([(name, types[kind]) for name, kind in fields])


def parse_json_objects(values: pa.Array, schema: pa.Schema) -> pa.Table:
    """One row per value of ``values`` (binary, nulls allowed), in order, with the columns
    of ``schema`` (module docstring)."""
    kinds = fields_of(schema)
    values = values.cast(pa.binary())
    fast = _qualifies(values)
    fast_rows = np.flatnonzero(fast)
    parts: list[pa.Table] = []
    slow_rows: list[int] = []
    if len(fast_rows):
        lines = pc.binary_join_element_wise(values.filter(pa.array(fast)), _NEWLINE, _EMPTY)
        for start, table in _read_runs(lines, 0, len(lines), schema):
            if table is None:
                slow_rows.append(int(fast_rows[start]))
            else:
                parts.append(table)
    if parts and not slow_rows and fast.all():
        return pa.concat_tables(parts)  # every value read by pyarrow, in order
    fast_order = fast_rows if not slow_rows else np.setdiff1d(fast_rows, slow_rows)
    slow_rows = sorted([*slow_rows, *np.flatnonzero(~fast).tolist()])
    if slow_rows:
        column = values.take(pa.array(slow_rows, pa.int64()))
        rows = [parse_one(value, kinds) for value in column.to_pylist()]
        parts.append(pa.Table.from_pylist(rows, schema=schema))
    table = pa.concat_tables(parts) if parts else schema.empty_table()
    # parts hold the fast rows (in order) and then the slow ones: back to the values' order
    placed = np.concatenate([fast_order, np.asarray(slow_rows, dtype=np.int64)])
    order = np.empty(len(values), dtype=np.int64)
    order[placed] = np.arange(len(values))
    return table.take(pa.array(order)).combine_chunks()


def fields_of(schema: pa.Schema) -> list[tuple[str, str]]:
    """The ``(name, kind)`` pairs of ``schema``; ValueError for a type other than string
    and int64."""
    unknown = sorted({str(field.type) for field in schema} - {str(t) for t in _KINDS})
    if unknown:
        raise ValueError(f"unsupported field types {unknown}: only string and int64")
    return [(field.name, _KINDS[field.type]) for field in schema]


def _qualifies(values: pa.Array) -> np.ndarray:
    """Per value: worth giving to pyarrow (module docstring)."""
    count = len(values)
    if count == 0:
        return np.zeros(0, dtype=bool)
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    offsets = _offsets(values)
    data = np.frombuffer(values.buffers()[2] or b"", dtype=np.uint8)
    starts, ends = offsets[:-1], offsets[1:]
    ok: np.ndarray = valid & (ends > starts)
    if not ok.any():
        return ok
    first = np.where(ok, data[np.where(ok, starts, 0)], 0)
    last = np.where(ok, data[np.where(ok, ends - 1, 0)], 0)
    ok &= (first == ord("{")) & (last == ord("}"))
    control = np.flatnonzero(data[offsets[0] : offsets[-1]] < 0x20) + offsets[0]
    if len(control):
        # the value holding each control byte: the first one ending after it
        owners = np.searchsorted(ends, control, side="right")
        ok[owners[owners < count]] = False
    return ok


def _offsets(values: pa.Array) -> np.ndarray:
    """The value offsets of a binary array, into its data buffer, for its slice."""
    every = np.frombuffer(values.buffers()[1], dtype=np.int32)
    return every[values.offset : values.offset + len(values) + 1]


def _read_runs(
    lines: pa.Array, start: int, stop: int, schema: pa.Schema
) -> Iterator[tuple[int, pa.Table | None]]:
    """Parse lines ``start:stop`` with pyarrow, halving a run that it refuses: (first line,
    its table) for each run read, (line, None) for each line refused alone."""
    run = lines.slice(start, stop - start)
    offsets = _offsets(run)
    data = run.buffers()[2]
    assert data is not None
    body = data.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    try:
        table = pj.read_json(pa.BufferReader(body), parse_options=_options(schema))
        table.validate(full=True)  # the reader lets invalid UTF-8 through in strings
    except pa.ArrowInvalid:
        table = None
    if table is not None and table.num_rows == stop - start:
        yield start, table.select(schema.names)
    elif stop - start == 1:
        yield start, None
    else:
        middle = (start + stop) // 2
        yield from _read_runs(lines, start, middle, schema)
        yield from _read_runs(lines, middle, stop, schema)


def _options(schema: pa.Schema) -> pj.ParseOptions:
    return pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")


def parse_one(value: bytes | None, fields: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """One value as ``from_json`` parses it: the ``(name, kind)`` fields, each None when
    missing or not convertible (module docstring)."""
    row: dict[str, Any] = dict.fromkeys(name for name, _ in fields)
    if not value:
        return row
    text = value.decode("utf-8", "replace").lstrip(_WHITESPACE)
    try:
        document, _ = _DECODER.raw_decode(text)
    except ValueError:
        return row
    if not isinstance(document, dict):
        return row
    for name, kind in fields:
        if name in document:
            row[name] = _as_long(document[name]) if kind == "long" else _as_text(document[name])
    return row


def _as_long(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value if _LONG_MIN <= value <= _LONG_MAX else None
    return None


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        # a lone surrogate (an escape such as \ud800) becomes "?", as in the JVM
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _java_double(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _java_double(value: float) -> str:
    """``value`` as Jackson writes a double (Java's ``Double.toString``: the shortest digits,
    in scientific notation below 10^-3 and from 10^7); NaN and the infinities quoted, as
    Jackson quotes them."""
    if math.isnan(value):
        return '"NaN"'
    if math.isinf(value):
        return '"Infinity"' if value > 0 else '"-Infinity"'
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(value)  # Python writes this range as Java does: 0.001, 1.5, 100000.0
    _, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    sign = "-" if value < 0 else ""
    return f"{sign}{text[0]}.{text[1:] or '0'}E{len(text) + exponent - 1}"
