"""Column types of the DuckDB store (:mod:`~riverbed.sinks.duckdb_store`): which DuckDB type
holds a JSON value, and how a value is written to its column and read back.

- A column's type is inferred from its first non-null value (values come as JSON, with no
  other type information): an int BIGINT, a float DOUBLE, a bool BOOLEAN, an object or array
  JSON, a string in the capture's UTC form (``2026-01-01T12:00:00.123456Z``, with or without
  the fraction; or ``infinity``) TIMESTAMPTZ, a string that is an exact decimal with a
  fraction (``12.50``: PostgreSQL's ``numeric``) DECIMAL(38, S), S its fraction's digits (a
  ``numeric(10, 2)`` column reads back as ``12.50``), any other value VARCHAR. A column seen
  only as null so far is VARCHAR, and takes the type of its first value.
- A value that does not fit its column's type (``abc`` for a TIMESTAMPTZ, ``1.5`` for a
  BIGINT) widens the column to VARCHAR, its values then text as the capture wrote them (a
  timestamp as ``...123456Z``, a decimal with its scale, anything else not a string as its
  JSON text) - except a decimal with more fraction digits, for which a DECIMAL column grows
  its scale (exact) while 38 digits hold its values. DOUBLE takes ints, and PostgreSQL's
  ``NaN`` and ``Infinity``.

Nothing here opens a database: these are the checks, the SQL types and casts, and the Arrow
arrays that :class:`~riverbed.sinks.duckdb_store.DuckDBStore` uses.
"""

from __future__ import annotations

import datetime
import decimal
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import orjson
import pyarrow as pa

__all__ = [
    "BIGINT_MAX",
    "BIGINT_MIN",
    "DECIMAL",
    "DOUBLE_WORDS",
    "MAX_DIGITS",
    "TIMESTAMP",
    "TIMESTAMP_FORMAT",
    "Column",
    "Kind",
    "all_fit",
    "arrow_array",
    "cast_sql",
    "decimal_digits",
    "decimal_for",
    "decimal_pattern",
    "id_part",
    "infer",
    "is_timestamp",
    "key_fits",
    "kind_of",
    "text_of",
]

MAX_DIGITS = 38  # DuckDB's widest DECIMAL
TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # riverbed.cdc.envelope's, in strftime's words

TIMESTAMP = re.compile(
    r"\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|1\d|2[0-8])T(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d"
    r"(?:\.\d{1,6})?Z"
)
"""The capture's form, days 29 to 31 left to :func:`is_timestamp` (the common case at the
cost of one regular expression: a batch's values are checked one by one)."""
DECIMAL = re.compile(r"-?(0|[1-9]\d*)(?:\.(\d+))?")
DOUBLE_WORDS = frozenset({"NaN", "Infinity", "-Infinity"})  # PostgreSQL's, as captured
BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1


class Kind(Enum):
    BIGINT = "BIGINT"
    DOUBLE = "DOUBLE"
    BOOLEAN = "BOOLEAN"
    TIMESTAMPTZ = "TIMESTAMPTZ"
    DECIMAL = "DECIMAL"
    JSON = "JSON"
    VARCHAR = "VARCHAR"


@dataclass(slots=True)
class Column:
    kind: Kind
    scale: int = 0
    """DECIMAL only: the digits after the point."""
    untyped: bool | None = False
    """VARCHAR only: True while every value is NULL (it takes its first value's type), None
    when unknown (a column found in the file: DuckDB counts its values when it matters)."""

    def sql(self) -> str:
        return (
            f"DECIMAL({MAX_DIGITS}, {self.scale})" if self.kind is Kind.DECIMAL else self.kind.value
        )


def all_fit(column: Column, values: Iterable[Any]) -> bool:
    """Whether ``column`` takes each of ``values`` as it is (a type check per kind, in one
    generator: this is the per-value cost of a batch)."""
    kind = column.kind
    if kind is Kind.VARCHAR:
        return column.untyped is False or all(v is None for v in values)
    if kind is Kind.BIGINT:
        return all(v is None or (type(v) is int and BIGINT_MIN <= v <= BIGINT_MAX) for v in values)
    if kind is Kind.DOUBLE:
        return all(
            v is None
            or type(v) is float
            or type(v) is int
            or (type(v) is str and v in DOUBLE_WORDS)
            for v in values
        )
    if kind is Kind.BOOLEAN:
        return all(v is None or type(v) is bool for v in values)
    if kind is Kind.JSON:
        return all(v is None or type(v) is dict or type(v) is list for v in values)
    if kind is Kind.TIMESTAMPTZ:
        match = TIMESTAMP.fullmatch
        return all(
            v is None or (type(v) is str and (match(v) is not None or is_timestamp(v)))
            for v in values
        )
    match = decimal_pattern(column.scale).fullmatch
    return all(v is None or (type(v) is str and match(v) is not None) for v in values)


def key_fits(column: Column, value: Any) -> bool:
    """Whether a key value (:func:`~riverbed.sinks.duckdb_staging.hashable`) can be in a
    primary-key column."""
    if column.kind is Kind.VARCHAR or (column.kind is Kind.JSON and type(value) is str):
        return value is not None
    return all_fit(column, (value,))


@functools.cache
def decimal_pattern(scale: int) -> re.Pattern[str]:
    """The decimal strings DECIMAL(38, scale) holds exactly."""
    whole = "0" if scale >= MAX_DIGITS else f"(?:0|[1-9]\\d{{0,{MAX_DIGITS - scale - 1}}})"
    fraction = f"(?:\\.\\d{{1,{scale}}})?" if scale else ""
    return re.compile(f"-?{whole}{fraction}")


def is_timestamp(value: str) -> bool:
    if value in ("infinity", "-infinity"):
        return True
    if (
        len(value) < 11
        or value[8:10] < "29"
        or not TIMESTAMP.fullmatch(value[:8] + "01" + value[10:])
    ):
        return False
    try:
        datetime.date.fromisoformat(value[:10])  # 2026-02-30 is not a date
    except ValueError:
        return False
    return True


def decimal_digits(value: str) -> tuple[int, int] | None:
    """(digits before the point, digits after it) of an exact decimal string, else None."""
    match = DECIMAL.fullmatch(value)
    if match is None:
        return None
    return len(match[1]), len(match[2] or "")


def decimal_for(values: Iterable[Any], *, whole: int) -> Column | None:
    """The narrowest DECIMAL(38, S) taking all of ``values`` and ``whole`` digits before the
    point, if there is one."""
    scale = 0
    for value in values:
        digits = decimal_digits(value) if type(value) is str else None
        if digits is None:
            return None
        whole, scale = max(whole, digits[0]), max(scale, digits[1])
    return Column(Kind.DECIMAL, scale=scale) if whole + scale <= MAX_DIGITS else None


def infer(value: Any) -> Column:
    """The column a first non-null value gives (module docstring)."""
    t = type(value)
    if value is None:
        return Column(Kind.VARCHAR, untyped=True)
    if t is bool:
        return Column(Kind.BOOLEAN)
    if t is int:
        return Column(Kind.BIGINT if BIGINT_MIN <= value <= BIGINT_MAX else Kind.VARCHAR)
    if t is float:
        return Column(Kind.DOUBLE)
    if t is dict or t is list:
        return Column(Kind.JSON)
    if t is not str:
        return Column(Kind.VARCHAR)
    if TIMESTAMP.fullmatch(value) or is_timestamp(value):
        return Column(Kind.TIMESTAMPTZ)
    digits = decimal_digits(value)
    if digits is not None and 0 < digits[1] <= MAX_DIGITS - digits[0]:
        return Column(Kind.DECIMAL, scale=digits[1])
    return Column(Kind.VARCHAR)


def text_of(value: Any) -> str:
    """A value as a VARCHAR column holds it: a string as it is, anything else as JSON."""
    if type(value) is str:
        return value
    return str(value) if type(value) is int else orjson.dumps(value).decode()  # ints past 64 bits


def kind_of(data_type: str) -> Kind:
    if data_type.startswith("DECIMAL"):
        return Kind.DECIMAL
    if data_type == "TIMESTAMP WITH TIME ZONE":
        return Kind.TIMESTAMPTZ
    try:
        return Kind(data_type)
    except ValueError:
        return Kind.VARCHAR  # not a type this store makes: written as text, cast by DuckDB


def cast_sql(column: Column, expression: str) -> str:
    if column.kind in (Kind.TIMESTAMPTZ, Kind.DECIMAL, Kind.JSON):
        return f"CAST({expression} AS {column.sql()})"
    return expression


def arrow_array(column: Column, values: list[Any]) -> pa.Array:
    kind = column.kind
    if kind is Kind.BIGINT:
        return pa.array(values, pa.int64())
    if kind is Kind.DOUBLE:
        return pa.array([v if v is None or type(v) is float else float(v) for v in values])
    if kind is Kind.BOOLEAN:
        return pa.array(values, pa.bool_())
    if kind is Kind.JSON:
        return pa.array([None if v is None else text_of(v) for v in values], pa.string())
    if kind is Kind.VARCHAR:
        return pa.array(
            [v if v is None or type(v) is str else text_of(v) for v in values], pa.string()
        )
    return pa.array(values, pa.string())  # TIMESTAMPTZ and DECIMAL: DuckDB casts the text


def id_part(value: Any) -> str:
    """A primary-key value in a row id, as the change's key held it (changes.row_id_of)."""
    if isinstance(value, str):
        return value
    if isinstance(value, datetime.datetime):
        return value.astimezone(datetime.UTC).strftime(TIMESTAMP_FORMAT)
    if isinstance(value, decimal.Decimal):
        return str(value)  # with its scale, as the capture wrote it
    return orjson.dumps(value).decode()
