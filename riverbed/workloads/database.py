"""The shop's tables in PostgreSQL: created if missing, written in transactions (psycopg2).

:class:`ShopDatabase` holds one connection (``TimeZone=UTC``) for one run of the workload:
:meth:`~ShopDatabase.create_tables` creates DESIGN.md's tables that are missing
(``CREATE TABLE IF NOT EXISTS public.users`` ..., :data:`~riverbed.workloads.oltp.SCHEMAS`);
:meth:`~ShopDatabase.apply` writes a batch of operations in one transaction — consecutive
inserts into one table as one multi-row statement, inserts as upserts
(``ON CONFLICT (key) DO UPDATE``) so that a second run over the same tables rewrites the rows
instead of failing. A database error rolls the batch back and raises
:class:`~riverbed.workloads.WorkloadError`; earlier batches stay committed.
"""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import psycopg2
import psycopg2.extras

from riverbed.workloads import ConfigError, WorkloadError
from riverbed.workloads.oltp import PRIMARY_KEYS, SCHEMAS, Operation, OpKind

__all__ = ["ShopDatabase"]

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class ShopDatabase:
    """The shop's tables in PostgreSQL, written with psycopg2 (one connection, UTC)."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self._updates: dict[tuple[str, tuple[str, ...]], str] = {}

    @classmethod
    def connect(cls, dsn: str, *, timeout_s: float) -> ShopDatabase:
        try:
            connection = psycopg2.connect(
                dsn,
                connect_timeout=max(1, round(timeout_s)),
                options="-c TimeZone=UTC",
                application_name="riverbed-workload",
            )
        except psycopg2.OperationalError as e:
            reason = " ".join(str(e).split())
            raise WorkloadError(f"cannot connect to the database: {reason}") from None
        except psycopg2.ProgrammingError as e:  # a malformed DSN
            reason = " ".join(str(e).split()).removeprefix("invalid dsn: ")
            raise ConfigError(f"invalid DSN: {reason}") from None
        return cls(connection)

    def create_tables(self) -> None:
        """``CREATE TABLE IF NOT EXISTS`` each of DESIGN.md's tables, in one transaction."""
        statements = [
            f"CREATE TABLE IF NOT EXISTS public.{table} ("
            + ", ".join(
                f"{name} {kind}" + (" PRIMARY KEY" if name == PRIMARY_KEYS[table] else "")
                for name, kind in columns
            )
            + ")"
            for table, columns in SCHEMAS.items()
        ]
        self._transaction(lambda cursor: cursor.execute("; ".join(statements)))

    def apply(self, batch: Sequence[Operation]) -> None:
        """Apply the operations in order, in one transaction."""

        def write(cursor: Any) -> None:
            for (kind, table), group in itertools.groupby(batch, lambda o: (o.kind, o.table)):
                if kind is OpKind.INSERT:
                    rows = [self._row(table, op.values) for op in group]
                    psycopg2.extras.execute_values(
                        cursor, self._insert_sql(table), rows, page_size=1000
                    )
                    continue
                for op in group:
                    if kind is OpKind.UPDATE:
                        columns = tuple(op.values)
                        cursor.execute(
                            self._update_sql(table, columns),
                            [*self._row(table, op.values), op.key],
                        )
                    else:
                        cursor.execute(
                            f"DELETE FROM public.{table} WHERE {PRIMARY_KEYS[table]} = %s",
                            (op.key,),
                        )

        self._transaction(write)

    def close(self) -> None:
        self._connection.close()

    def _transaction(self, work: Callable[[Any], None]) -> None:
        try:
            with self._connection.cursor() as cursor:
                work(cursor)
            self._connection.commit()
        except psycopg2.Error as e:
            if not self._connection.closed:
                self._connection.rollback()
            raise WorkloadError(f"database error: {' '.join(str(e).split())}") from None

    @staticmethod
    def _row(table: str, values: dict[str, str | int]) -> list[object]:
        types = dict(SCHEMAS[table])
        return [
            _EPOCH + datetime.timedelta(milliseconds=value)
            if types[name] == "timestamptz" and isinstance(value, int)
            else value
            for name, value in values.items()
        ]

    def _insert_sql(self, table: str) -> str:
        names = [name for name, _ in SCHEMAS[table]]
        key = PRIMARY_KEYS[table]
        updates = ", ".join(f"{n} = EXCLUDED.{n}" for n in names if n != key)
        return (
            f"INSERT INTO public.{table} ({', '.join(names)}) VALUES %s "
            f"ON CONFLICT ({key}) DO UPDATE SET {updates}"
        )

    def _update_sql(self, table: str, columns: tuple[str, ...]) -> str:
        cache_key = (table, columns)
        if cache_key not in self._updates:
            assignments = ", ".join(f"{c} = %s" for c in columns)
            self._updates[cache_key] = (
                f"UPDATE public.{table} SET {assignments} WHERE {PRIMARY_KEYS[table]} = %s"
            )
        return self._updates[cache_key]
