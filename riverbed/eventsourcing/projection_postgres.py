"""A projection's model as a PostgreSQL table (the carts': ``carts``), its position in
another (``riverbed_projection_positions``).

    TABLE        one row an aggregate: ID text PRIMARY KEY, user_id text, version integer,
                 and a column per field of the state document (boolean, bigint, double
                 precision, text as the field's value in the initial state is; jsonb
                 otherwise; the carts': items jsonb, checked_out boolean)
    positions    (projection text, topic text, partition integer, next_offset bigint),
                 primary key (projection, topic, partition); ``projection`` is TABLE's name

A batch is one PostgreSQL transaction: the upserts of the aggregates it changed and the
upserts of its position. An upsert never replaces a row with an older version (a version
guard, so a second writer that slipped past the lock cannot move a row backwards).

**Crash behaviour.** A runner killed before the commit leaves nothing (PostgreSQL rolls the
transaction back); killed after it, the next runner reads the position the commit wrote and
seeks there, so no event's effect is applied twice. The runner's in-memory aggregates are
restored from the table. **Rebuild**: the table is dropped and made anew, and the position
deleted, in one transaction.

One runner a model: a session-level advisory lock on the projection's name is held while it
runs (released when its connection ends, also when the runner is killed); a second one waits
for it up to its timeout, then stops.

This is the one module of riverbed.eventsourcing that imports psycopg2.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import psycopg2
import psycopg2.extras
from psycopg2 import sql

from riverbed.eventsourcing.aggregate_type import AggregateType
from riverbed.eventsourcing.errors import MessageError
from riverbed.eventsourcing.handling import Aggregate
from riverbed.eventsourcing.projections import Batch, ProjectionError, Restored

__all__ = ["POSITIONS_TABLE", "PostgresStore", "columns_of"]

POSITIONS_TABLE = "riverbed_projection_positions"

S = TypeVar("S")
C = TypeVar("C")
E = TypeVar("E")
T = TypeVar("T")


def columns_of(kind: AggregateType[S, C, E]) -> list[tuple[str, str]]:
    """The model table's columns (name, SQL type) for ``kind``, in the state document's
    order; the id column is the primary key."""
    document = kind.document(kind.initial("-"))
    fixed = {kind.format.id_field: "text PRIMARY KEY", "user_id": "text", "version": "integer"}
    return [(name, fixed.get(name) or _sql_type(value)) for name, value in document.items()]


def _sql_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "bigint"
    if isinstance(value, float):
        return "double precision"
    if isinstance(value, str):
        return "text"
    return "jsonb"


class PostgresStore(Generic[S, C, E]):
    """``kind``'s states in the table ``table`` of the database at ``dsn`` (see the module
    docstring). ``table`` may name its schema (``shop.carts``)."""

    def __init__(
        self,
        kind: AggregateType[S, C, E],
        *,
        dsn: str,
        table: str | None = None,
        positions_table: str = POSITIONS_TABLE,
        timeout_s: float = 30,
    ) -> None:
        self.kind = kind
        self.dsn = dsn
        self.table = table or kind.name
        self.positions_table = positions_table
        self.timeout_s = timeout_s
        self.columns = columns_of(kind)
        self._connection: Any = None

    @property
    def name(self) -> str:
        return f"table {self.table}"

    def start(self, *, partitions: int) -> None:
        try:
            self._connection = psycopg2.connect(
                self.dsn, connect_timeout=max(1, round(self.timeout_s)),
                application_name=f"riverbed-es-project-{self.table}",
            )  # fmt: skip
        except psycopg2.OperationalError as e:
            reason = " ".join(str(e).split())
            raise ProjectionError(f"cannot connect to the database: {reason}") from None
        except psycopg2.ProgrammingError as e:  # a malformed DSN
            reason = " ".join(str(e).split()).removeprefix("invalid dsn: ")
            raise ProjectionError(f"invalid DSN: {reason}") from None
        self._lock()
        self._transaction(self._create)

    def clear(self) -> None:
        def renew(cursor: Any) -> None:
            cursor.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(self._table()))
            cursor.execute(
                sql.SQL("DELETE FROM {} WHERE projection = %s").format(self._positions()),
                (self.table,),
            )
            self._create(cursor)

        self._transaction(renew)

    def restore(self) -> Restored[S]:
        names = [name for name, _ in self.columns]

        def read(cursor: Any) -> tuple[list[Any], list[Any]]:
            query = sql.SQL("SELECT {} FROM {}").format(
                sql.SQL(", ").join(map(sql.Identifier, names)), self._table()
            )
            cursor.execute(query)
            rows = cursor.fetchall()
            cursor.execute(
                sql.SQL(
                    "SELECT partition, next_offset FROM {} WHERE projection = %s AND topic = %s"
                ).format(self._positions()),
                (self.table, self.kind.topics.events),
            )
            return rows, cursor.fetchall()

        rows, offsets = self._transaction(read)
        aggregates: dict[str, Aggregate[S]] = {}
        for row in rows:
            try:
                aggregate = self.kind.aggregate_of(dict(zip(names, row, strict=True)))
            except MessageError as e:
                raise ProjectionError(
                    f"cannot restore from {self.table}: {e} (--rebuild makes the model anew)"
                ) from None
            aggregates[aggregate.aggregate_id] = aggregate
        positions = {int(p): int(offset) for p, offset in offsets}
        return Restored(aggregates=aggregates, positions=positions)

    def commit(self, batch: Batch[S]) -> None:
        names = [name for name, _ in self.columns]
        kinds = dict(self.columns)
        key = self.kind.format.id_field
        upsert = sql.SQL(
            "INSERT INTO {table} AS current ({columns}) VALUES %s ON CONFLICT ({key}) DO UPDATE "
            "SET {updates} WHERE current.version < EXCLUDED.version"
        ).format(
            table=self._table(),
            columns=sql.SQL(", ").join(map(sql.Identifier, names)),
            key=sql.Identifier(key),
            updates=sql.SQL(", ").join(
                sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(n)) for n in names if n != key
            ),
        )
        rows = [
            tuple(
                psycopg2.extras.Json(value) if kinds[name] == "jsonb" else value
                for name, value in self.kind.document(aggregate).items()
            )
            for aggregate in batch.aggregates
        ]
        position = sql.SQL(
            "INSERT INTO {} (projection, topic, partition, next_offset) VALUES %s "
            "ON CONFLICT (projection, topic, partition) DO UPDATE SET next_offset = "
            "EXCLUDED.next_offset"
        ).format(self._positions())
        events = self.kind.topics.events
        offsets = [(self.table, events, p, o) for p, o in sorted(batch.positions.items())]

        def write(cursor: Any) -> None:
            if rows:
                psycopg2.extras.execute_values(cursor, upsert.as_string(cursor), rows,
                                               page_size=1000)  # fmt: skip
            psycopg2.extras.execute_values(cursor, position.as_string(cursor), offsets)

        self._transaction(write)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()  # the advisory lock goes with the session
            self._connection = None

    def _table(self) -> sql.Composable:
        return sql.Identifier(*self.table.split(".", 1))

    def _positions(self) -> sql.Composable:
        return sql.Identifier(*self.positions_table.split(".", 1))

    def _create(self, cursor: Any) -> None:
        columns = sql.SQL(", ").join(
            sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(kind))
            for name, kind in self.columns
        )
        cursor.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(self._table(), columns))
        cursor.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (projection text, topic text, partition integer, "
                "next_offset bigint NOT NULL, PRIMARY KEY (projection, topic, partition))"
            ).format(self._positions())
        )

    def _lock(self) -> None:
        """The projection's advisory lock, waiting up to ``timeout_s`` for it."""

        def try_lock(cursor: Any) -> bool:
            cursor.execute(
                "SELECT pg_try_advisory_lock(hashtext(%s))", (f"riverbed-es-project:{self.table}",)
            )
            return bool(cursor.fetchone()[0])

        deadline = time.monotonic() + self.timeout_s
        while not self._transaction(try_lock):
            if time.monotonic() > deadline:
                raise ProjectionError(
                    f"another runner holds the projection into {self.table} (its advisory "
                    f"lock) for more than {self.timeout_s:g} s"
                )
            time.sleep(0.2)

    def _transaction(self, work: Callable[[Any], T]) -> T:
        """``work(cursor)`` in one transaction, committed; its result."""
        try:
            with self._connection, self._connection.cursor() as cursor:
                return work(cursor)
        except psycopg2.Error as e:
            reason = " ".join(str(e).split())
            raise ProjectionError(f"{self.table}: {reason}") from None
