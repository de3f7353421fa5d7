"""From decoded pgoutput messages to the records of the CDC topics (pure, no I/O).

:class:`ChangeTranslator` is fed the stream of one replication session in order, each
message with the LSN it was sent at, and returns the records to produce for it:

- ``Relation`` messages are remembered per table oid (the latest wins, so columns added by
  ALTER TABLE appear in every later event);
- each change of a captured table becomes Debezium's envelope (op ``c``/``u``/``d``/``t``)
  on topic ``PREFIX.SCHEMA.TABLE``, keyed by the JSON object of its key columns; a delete
  is followed by a tombstone; an update that changes the key becomes a delete of the old
  key (and its tombstone) and a create of the new one, as Debezium does;
- ``Begin`` gives every change of the transaction its ``txId`` and commit time; ``Commit``
  closes it.

Every record carries its :class:`Position`, ``(commit LSN, index in the transaction)``:
transactions arrive in commit order, so positions only grow. The capture uses it to tell,
after a restart, which records of a replayed transaction a partition already has. Snapshot
rows (op ``r``) come from :class:`SnapshotRecords`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from riverbed.cdc.envelope import Json, Source, change_event, key_of, row_of
from riverbed.cdc.pgoutput import (
    Begin,
    Commit,
    Delete,
    Insert,
    Message,
    Relation,
    Truncate,
    Update,
)
from riverbed.cdc.preflight import TableInfo

POSTGRES_EPOCH_US = 946_684_800_000_000  # 2000-01-01 UTC in microseconds since 1970

__all__ = [
    "ChangeTranslator",
    "Position",
    "Record",
    "SnapshotRecords",
    "TransactionEnd",
    "dumps",
    "topic_name",
]


class Position(NamedTuple):
    """Where a streamed record stands in the change stream: ``(commit_lsn, seq)``, seq
    counting the transaction's records from 1."""

    commit_lsn: int
    seq: int

    def header(self) -> bytes:
        return f"{self.commit_lsn}:{self.seq}".encode()

    @classmethod
    def from_header(cls, value: str | bytes) -> Position:
        text = value.decode() if isinstance(value, bytes) else value
        lsn, _, seq = text.partition(":")
        return cls(int(lsn), int(seq))


POSITION_HEADER = "riverbed.cdc.position"


@dataclass(frozen=True, slots=True)
class Record:
    topic: str
    key: bytes
    value: bytes | None  # None: a tombstone
    position: Position | None  # None for snapshot rows


@dataclass(frozen=True, slots=True)
class TransactionEnd:
    """A transaction's Commit: once its records are acknowledged, ``end_lsn`` may be
    confirmed to the slot."""

    end_lsn: int
    commit_ts_ms: int | None = None
    """When the transaction committed (epoch ms), if its Begin was seen."""


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def dumps(value: Json) -> bytes:
    """Compact UTF-8 JSON (one encoder for all: json.dumps with options builds one per call)."""
    return _ENCODER.encode(value).encode()


def topic_name(prefix: str, table: TableInfo) -> str:
    return f"{prefix}.{table.schema}.{table.table}"


@dataclass(slots=True)
class _Transaction:
    xid: int
    commit_lsn: int
    commit_ts_ms: int
    seq: int = 0


@dataclass
class ChangeTranslator:
    prefix: str
    db: str
    tables: Mapping[tuple[str, str], TableInfo]
    """The captured tables by (schema, table); changes of other tables are ignored."""
    clock_ms: Callable[[], int]
    relations: dict[int, Relation] = field(default_factory=dict)
    _transaction: _Transaction | None = None

    def feed(self, message: Message, lsn: int) -> list[Record] | TransactionEnd:
        """The records for ``message`` (sent at ``lsn``), or the end of a transaction."""
        if isinstance(message, Relation):
            self.relations[message.oid] = message
        elif isinstance(message, Begin):
            self._transaction = _Transaction(
                xid=message.xid,
                commit_lsn=message.final_lsn,
                commit_ts_ms=_ms(message.commit_time_us),
            )
        elif isinstance(message, Commit):
            transaction, self._transaction = self._transaction, None
            return TransactionEnd(
                message.end_lsn, None if transaction is None else transaction.commit_ts_ms
            )
        elif isinstance(message, Insert | Update | Delete):
            return self._change(message, lsn)
        elif isinstance(message, Truncate):
            return [
                record
                for oid in message.relation_oids
                for record in self._truncate(self.relations.get(oid), lsn)
            ]
        return []  # Origin, Type and logical messages carry no row changes

    def _change(self, message: Insert | Update | Delete, lsn: int) -> list[Record]:
        relation = self.relations.get(message.relation_oid)
        if relation is None:
            raise ValueError(f"a change of table oid {message.relation_oid} before its Relation")
        table = self.tables.get((relation.namespace, relation.name))
        if table is None:
            return []
        columns = relation.columns
        if isinstance(message, Insert):
            after = row_of(columns, message.new)
            return [self._event(table, "c", None, after, key_of(after, table.key_columns), lsn)]
        old = None
        if message.old is not None:
            old = row_of(columns, message.old)
            if message.old_is_key_only:  # only the key columns are set: 'K' tuples
                old = {name: old[name] for name in table.key_columns if name in old}
        if isinstance(message, Delete):
            assert old is not None
            key = key_of(old, table.key_columns)
            return [
                self._event(table, "d", old, None, key, lsn),
                self._tombstone(table, key),
            ]
        after = row_of(columns, message.new, old=None if message.old_is_key_only else message.old)
        key = key_of(after, table.key_columns)
        before = old if old is not None and not message.old_is_key_only else None
        if old is not None and all(name in old for name in table.key_columns):
            old_key = key_of(old, table.key_columns)
            if old_key != key:  # the key changed: a delete of the old key, a create of the new
                return [
                    self._event(table, "d", old, None, old_key, lsn),
                    self._tombstone(table, old_key),
                    self._event(table, "c", None, after, key, lsn),
                ]
        return [self._event(table, "u", before, after, key, lsn)]

    def _truncate(self, relation: Relation | None, lsn: int) -> list[Record]:
        table = None if relation is None else self.tables.get((relation.namespace, relation.name))
        if table is None:
            return []
        return [self._event(table, "t", None, None, {}, lsn)]

    def _event(
        self,
        table: TableInfo,
        op: str,
        before: Mapping[str, Json] | None,
        after: Mapping[str, Json] | None,
        key: Mapping[str, Json],
        lsn: int,
    ) -> Record:
        transaction = self._current()
        source = Source(
            name=self.prefix,
            db=self.db,
            schema=table.schema,
            table=table.table,
            tx_id=transaction.xid,
            lsn=lsn,
            commit_lsn=transaction.commit_lsn,
            commit_ts_ms=transaction.commit_ts_ms,
        )
        value = change_event(
            op=op, before=before, after=after, source=source, ts_ms=self.clock_ms()
        )
        return Record(topic_name(self.prefix, table), dumps(dict(key)), dumps(value), self._next())

    def _tombstone(self, table: TableInfo, key: Mapping[str, Json]) -> Record:
        return Record(topic_name(self.prefix, table), dumps(dict(key)), None, self._next())

    def _current(self) -> _Transaction:
        if self._transaction is None:
            raise ValueError("a change outside a transaction (no Begin)")
        return self._transaction

    def _next(self) -> Position:
        transaction = self._current()
        transaction.seq += 1
        return Position(transaction.commit_lsn, transaction.seq)


class SnapshotRecords:
    """Op ``r`` records of one table's snapshot rows, fast: the parts of the envelope that are
    the same for every row are encoded once (the same JSON as :func:`change_event`)."""

    def __init__(
        self, *, prefix: str, db: str, table: TableInfo, lsn: int, tx_id: int | None
    ) -> None:
        self.topic = topic_name(prefix, table)
        self._key_columns = table.key_columns
        self._source = functools.partial(
            Source,
            name=prefix,
            db=db,
            schema=table.schema,
            table=table.table,
            tx_id=tx_id,
            lsn=lsn,
            commit_lsn=lsn,
        )
        self._cached: tuple[int, bool, bytes] = (-1, False, b"")

    def record(self, row: Mapping[str, Json], *, last: bool, now_ms: int) -> Record:
        if self._cached[:2] != (now_ms, last):
            source = self._source(commit_ts_ms=now_ms, snapshot="last" if last else "true")
            tail = b',"source":%s,"op":"r","ts_ms":%d}' % (dumps(source.as_json()), now_ms)
            self._cached = (now_ms, last, tail)
        key = dumps({name: row[name] for name in self._key_columns})
        return Record(
            self.topic, key, b'{"before":null,"after":' + dumps(row) + self._cached[2], None
        )


def _ms(postgres_us: int) -> int:
    return (postgres_us + POSTGRES_EPOCH_US) // 1000
