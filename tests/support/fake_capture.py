"""A fake CDC capture of one table, for the changelog and join tests: the records riverbed's
capture would write (riverbed.cdc's envelope, written independently), and the true rows."""

from __future__ import annotations

import json
from typing import Any

Record = tuple[bytes, bytes | None]
"""(key, value) of one record; a None value is a tombstone."""


def text_lsn(lsn: int) -> str:
    """An LSN as PostgreSQL prints it (``16/B374D848``)."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


class FakeCapture:
    """A fake CDC capture of one table (key column ``key_column``): it keeps the true rows
    and writes the records riverbed's capture would, one *unit* (the records of one change:
    ``[c]``, ``[u]``, ``[d, tombstone]``, or ``[d, tombstone, c]`` for a key change) at a
    time, all kept in ``units``. ``clock`` (shared between tables) gives positions: each
    unit is a transaction whose change LSNs may be smaller than an earlier transaction's
    (only commitLsn grows)."""

    def __init__(self, key_column: str, clock: list[int], *, full: bool = False) -> None:
        self.key_column = key_column
        self.clock = clock
        self.full = full  # REPLICA IDENTITY FULL, else DEFAULT
        self.rows: dict[Any, dict[str, Any]] = {}
        self.units: list[list[Record]] = []

    def _record(self, op: str, key: Any, before: Any, after: Any, *, lsn: int) -> Record:
        commit = self.clock[0]
        as_text = commit % 3 == 0  # both JSON forms of an LSN
        source = {
            "version": "riverbed", "connector": "postgresql", "name": "shop", "db": "shop",
            "schema": "public", "table": "t", "txId": commit, "snapshot": "false",
            "lsn": text_lsn(lsn) if as_text else lsn,
            "commitLsn": text_lsn(commit) if as_text else commit,
            "ts_ms": 1_000 * commit,
        }  # fmt: skip
        value = {"before": before, "after": after, "source": source, "op": op, "ts_ms": 0}
        return json.dumps({self.key_column: key}).encode(), json.dumps(value).encode()

    def _unit(self, *records: tuple[str, Any, Any, Any]) -> list[Record]:
        self.clock[0] += 1000
        base = self.clock[0] - 999 + (self.clock[0] * 7919) % 500  # not monotonic across units
        unit: list[Record] = []
        for i, (op, key, before, after) in enumerate(records):
            unit.append(self._record(op, key, before, after, lsn=base + i))
            if op == "d":
                unit.append((json.dumps({self.key_column: key}).encode(), None))
        self.units.append(unit)
        return unit

    def _old(self, key: Any) -> dict[str, Any]:
        return self.rows[key] if self.full else {self.key_column: key}

    def insert(self, row: dict[str, Any]) -> list[Record]:
        self.rows[row[self.key_column]] = row
        return self._unit(("c", row[self.key_column], None, row))

    def update(self, key: Any, row: dict[str, Any]) -> list[Record]:
        """Update the row of ``key`` to ``row`` (a key change if its key differs)."""
        old = self._old(key)
        del self.rows[key]
        new_key = row[self.key_column]
        self.rows[new_key] = row
        if new_key == key:
            return self._unit(("u", key, old if self.full else None, row))
        return self._unit(("d", key, old, None), ("c", new_key, None, row))

    def delete(self, key: Any) -> list[Record]:
        before = self._old(key)
        del self.rows[key]
        return self._unit(("d", key, before, None))

    def snapshot(self) -> list[Record]:
        """Op r records of every row, at the current position (not one of ``units``, which
        are the streamed changes)."""
        self.clock[0] += 1000
        return [
            self._record("r", key, None, row, lsn=self.clock[0]) for key, row in self.rows.items()
        ]
