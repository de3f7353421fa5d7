"""Does a derived store agree with its source? The comparison behind ``riverbed sink verify``
(pure: the rows come from the caller).

Rows are compared in one form per store (:func:`comparable`): SQL NULL and a missing column
are the same; a DECIMAL and a ``numeric`` string are equal when their numbers are; a
TIMESTAMPTZ and an ISO-8601 string when their instants are. Redis holds text, so there the
source row is turned into the hash fields the sink writes and compared as text.

With writes going on, a store is always a little behind. :class:`Watch` judges what was
committed before verify started: the differences of its first look. It keeps comparing
until each of them is gone, or its source row has changed (the row is in flight, not
judged), or the time is up; the ones left *persisted* (the store had the whole wait to
apply a row that stood still) and are reported. A difference first seen later is a change
committed after the start: in flight.
"""

from __future__ import annotations

import datetime
import decimal
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Difference", "Watch", "comparable", "compare"]

Rows = Mapping[str, Mapping[str, Any]]
"""Row id -> the row (column -> value)."""

_INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:?\d\d)")
_DECIMAL = re.compile(r"-?\d+\.\d+")


def comparable(value: Any) -> Any:
    """``value`` in the form rows are compared in (module docstring)."""
    if isinstance(value, str):
        if _INSTANT.fullmatch(value):
            return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        if _DECIMAL.fullmatch(value):
            return decimal.Decimal(value)
        return value
    if isinstance(value, datetime.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=datetime.UTC)
    if isinstance(value, float) and value.is_integer():
        return decimal.Decimal(int(value))
    if isinstance(value, int | float) and not isinstance(value, bool):
        return decimal.Decimal(str(value))
    return value


def _row(row: Mapping[str, Any], value: Callable[[Any], Any]) -> dict[str, Any]:
    return {name: value(v) for name, v in row.items() if v is not None}


@dataclass(frozen=True, slots=True)
class Difference:
    row_id: str
    kind: str
    """``missing`` (in the source, not the store), ``extra`` or ``different``."""
    expected: Mapping[str, Any] | None
    found: Mapping[str, Any] | None


def compare(
    expected: Rows, found: Rows, *, value: Callable[[Any], Any] = comparable
) -> dict[str, Difference]:
    """The rows where ``found`` (a store's) differs from ``expected`` (the source's), by id.
    ``value`` maps each value to the form compared (None columns are dropped first)."""
    differences: dict[str, Difference] = {}
    for row_id, row in expected.items():
        other = found.get(row_id)
        if other is None:
            differences[row_id] = Difference(row_id, "missing", row, None)
        elif _row(row, value) != _row(other, value):
            differences[row_id] = Difference(row_id, "different", row, other)
    for row_id, other in found.items():
        if row_id not in expected:
            differences[row_id] = Difference(row_id, "extra", None, other)
    return differences


@dataclass
class Watch:
    """One store's table, compared round after round (module docstring). Judged are the
    differences of the first look (what was committed before verify started) whose source
    row has not changed since: each is resolved once the store holds the row."""

    start: dict[str, Difference] | None = None
    """The differences of the first look."""
    current: dict[str, Difference] = field(default_factory=dict)
    rows: int = 0
    """The source's rows at the last look."""

    def look(self, expected: Rows, found: Rows, value: Callable[[Any], Any]) -> None:
        self.rows = len(expected)
        self.current = compare(expected, found, value=value)
        if self.start is None:
            self.start = dict(self.current)

    def persisting(self) -> list[Difference]:
        """The differences of the first look still there, their source rows unchanged."""
        start = self.start or {}
        return [
            d
            for row_id, d in sorted(self.current.items())
            if row_id in start and start[row_id].expected == d.expected
        ]

    def in_flight(self) -> int:
        """Differences now that are not judged: rows changed since verify started."""
        return len(self.current) - len(self.persisting())
