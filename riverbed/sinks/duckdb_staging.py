"""A batch of changes folded for the DuckDB store (:mod:`~riverbed.sinks.duckdb_store`): the
part of its work that needs no database, so that it can run where the batch is decoded - in
the sink's reading thread, or in a decoder process of its own (:mod:`~riverbed.sinks.decoding`).

:class:`DuckDBStager` collapses the changes it is given to the last change per (table, key):
a later row replaces an earlier one, taking the earlier one's values for its unavailable
columns; a row after a delete is a new row (its unavailable columns NULL); a truncate drops
what it holds for its table and marks the table truncated. :meth:`DuckDBStager.take` hands
over, per table, a :class:`StagedTable`: the truncate, the deletes' keys and the upserts as
columns - plain lists, cheap to pickle. The store then only checks types and writes.

A table is named after its topic's last dot-separated part
(:func:`~riverbed.sinks.changes.collection_of_topic`); names that differ only in case are
one table (DuckDB's names ignore case), called as the first topic seen calls it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import orjson

from riverbed.sinks.changes import Change, SinkError, collection_of_topic

__all__ = ["POSITIONS_TABLE", "DuckDBStager", "StagedTable", "Upserts", "hashable", "wrong_key"]

POSITIONS_TABLE = "riverbed_sink_positions"

_NONE: frozenset[str] = frozenset()


def hashable(value: Any) -> Any:
    """A key value that can be a dict key: an object or array as its JSON text."""
    return orjson.dumps(value).decode() if type(value) is dict or type(value) is list else value


def wrong_key(topic: str, fields: tuple[str, ...], table: str, key: tuple[str, ...]) -> SinkError:
    return SinkError(
        f"{topic}: a key with fields ({', '.join(fields)}) for table {table}, whose primary "
        f"key is ({', '.join(key)})"
    )


@dataclass(slots=True)
class Upserts:
    """Rows with the same unavailable columns: their column ``names`` and, per name, the
    rows' values (None where a row has no such field)."""

    unavailable: frozenset[str]
    names: list[str]
    columns: list[list[Any]]

    @property
    def rows(self) -> int:
        return len(self.columns[0]) if self.columns else 0


@dataclass(slots=True)
class StagedTable:
    """What a batch does to one table, in this order: empty it (``truncate``), delete the
    ``deletes`` keys, upsert the rows of each of ``upserts``. Keys are the values of the
    fields ``key`` (the batch's first key's fields, in its order)."""

    name: str
    topic: str
    """The topic of the table's first change in the batch (for messages)."""
    key: tuple[str, ...]
    truncate: bool = False
    deletes: list[tuple[Any, ...]] = field(default_factory=list)
    upserts: list[Upserts] = field(default_factory=list)


@dataclass(slots=True)
class _Pending:
    name: str
    topic: str
    key: tuple[str, ...] | None = None
    truncate: bool = False
    rows: dict[tuple[Any, ...], tuple[dict[str, Any], frozenset[str]] | None] = field(
        default_factory=dict
    )
    """Key values (in ``key``'s order) -> the key's last row and its unavailable columns, or
    None: delete."""


def _columns(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """The rows' field names (in the order they first come) and, per name, the rows'
    values (None where a row has no such field)."""
    names = tuple(rows[0])
    if all(map(names.__eq__, map(tuple, rows))):  # the same fields in the same order, as a
        # capture writes a table's rows: one transposition
        return list(names), [list(c) for c in zip(*map(dict.values, rows), strict=True)]
    names = tuple(dict.fromkeys(itertools.chain.from_iterable(rows)))
    return list(names), [[row.get(n) for row in rows] for n in names]


class DuckDBStager:
    """See the module docstring. Picklable: it holds nothing but what it was given."""

    def __init__(self) -> None:
        self._pending: dict[str, _Pending] = {}  # by lower-case table name
        self._by_topic: dict[str, _Pending] = {}

    def stage(self, change: Change) -> None:
        """Fold ``change`` into the batch; a SinkError for a change no table can take."""
        topic, _, _, row, key, unavailable_columns, truncate, _ = change  # per change: fast
        pending = self._by_topic.get(topic)
        if pending is None:
            pending = self._table_of(topic)
        if truncate:
            pending.rows.clear()
            pending.truncate = True
            return
        fields = pending.key
        if fields is None:
            fields = pending.key = tuple(key)
        if tuple(key) == fields:
            values_of_key = tuple(key.values())
        elif key.keys() == set(fields):
            values_of_key = tuple(key[k] for k in fields)
        else:
            raise wrong_key(topic, tuple(key), pending.name, fields)
        try:
            hash(values_of_key)
        except TypeError:  # an object or array in the key
            values_of_key = tuple(map(hashable, values_of_key))
        rows = pending.rows
        if row is None:
            rows[values_of_key] = None
            return
        values = {**row, **key}
        if not unavailable_columns:
            rows[values_of_key] = (values, _NONE)
            return
        unavailable = frozenset(unavailable_columns)
        if values_of_key in rows:
            earlier = rows[values_of_key]
            if earlier is None:  # deleted earlier in the batch: a new row
                unavailable = _NONE
            else:
                previous, previous_unavailable = earlier
                values |= {c: previous[c] for c in unavailable if c in previous}
                unavailable &= previous_unavailable
        rows[values_of_key] = (values, unavailable)

    def _table_of(self, topic: str) -> _Pending:
        name = collection_of_topic(topic)
        if name.lower() == POSITIONS_TABLE:
            raise SinkError(f"{topic}: a topic cannot write the table {name}")
        pending = self._pending.get(name.lower())
        if pending is None:
            pending = self._pending[name.lower()] = _Pending(name, topic)
        self._by_topic[topic] = pending
        return pending

    def take(self) -> list[StagedTable]:
        """The batch staged so far, per table; the stager is then empty."""
        staged: list[StagedTable] = []
        for pending in self._pending.values():
            table = StagedTable(pending.name, pending.topic, pending.key or (), pending.truncate)
            groups: dict[frozenset[str], list[dict[str, Any]]] = {}
            for key, upsert in pending.rows.items():
                if upsert is None:
                    table.deletes.append(key)
                else:
                    groups.setdefault(upsert[1], []).append(upsert[0])
            for unavailable, rows in groups.items():
                table.upserts.append(Upserts(unavailable, *_columns(rows)))
            staged.append(table)
        self._pending, self._by_topic = {}, {}
        return staged
