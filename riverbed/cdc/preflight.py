"""What the capture needs to know about the database before it starts, with clear errors.

:func:`connect` opens a psycopg2 connection in UTC (a replication one for the log-based
capture); :func:`parse_keys` reads the ``--key`` flags. :func:`inspect_tables` runs on an
ordinary connection (not the replication one) and checks, in this order, each failure a
:class:`~riverbed.cdc.errors.CaptureSetupError` whose message says what to do:

- ``wal_level`` is ``logical`` (logical decoding needs it; changing it needs a restart);
- the user may replicate (superuser, or the ``REPLICATION`` attribute);
- every table exists, and the user may ``SELECT`` it (the initial snapshot reads it);
- every table has a primary key, or one was given for it (``--key``): the key of every
  message is the JSON object of those columns.

It returns, per table, the primary-key columns and the replica identity (``d``efault,
``f``ull, ``i``ndex, ``n``othing), which decides what ``before`` holds (see
:mod:`riverbed.cdc.envelope`). :func:`ensure_publication` creates the publication for the
tables if it is missing, and adds tables it lacks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg2
import psycopg2.extras

from riverbed.cdc.errors import CaptureSetupError

__all__ = [
    "TableInfo",
    "connect",
    "ensure_publication",
    "identifier",
    "inspect_tables",
    "parse_keys",
    "parse_table_name",
    "quoted_name",
]


def connect(dsn: str, *, timeout_s: float, replication: bool = False) -> Any:
    """A connection in UTC (times print as ``+00``), or a CaptureSetupError saying why not."""
    factory = psycopg2.extras.LogicalReplicationConnection if replication else None
    try:
        connection = psycopg2.connect(
            dsn,
            connection_factory=factory,
            connect_timeout=max(1, round(timeout_s)),
            options="-c TimeZone=UTC -c DateStyle=ISO",
            application_name="riverbed-cdc",
        )
    except psycopg2.OperationalError as e:
        reason = " ".join(str(e).split())
        raise CaptureSetupError(f"cannot connect to the database: {reason}") from None
    except psycopg2.ProgrammingError as e:  # a malformed DSN
        raise CaptureSetupError(f"invalid --dsn: {' '.join(str(e).split())}") from None
    if not replication:
        connection.autocommit = True
    return connection


@dataclass(frozen=True, slots=True, kw_only=True)
class TableInfo:
    schema: str
    table: str
    key_columns: tuple[str, ...]
    replica_identity: str

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.table}"


def parse_table_name(text: str) -> tuple[str, str]:
    """``schema.table`` (or ``table``, in ``public``) as (schema, table)."""
    schema, dot, table = text.strip().partition(".")
    if not dot:
        schema, table = "public", schema
    if not schema or not table or "." in table:
        raise CaptureSetupError(f"{text!r} is not a table name of the form schema.table")
    return schema, table


def parse_keys(specs: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """``["s.t=a,b"]`` → ``{"s.t": ("a", "b")}`` (the ``--key`` flags)."""
    keys: dict[str, tuple[str, ...]] = {}
    for spec in specs:
        table, sep, columns = spec.partition("=")
        names = tuple(c.strip() for c in columns.split(",") if c.strip())
        if not sep or not table.strip() or not names:
            raise CaptureSetupError(f"--key expects schema.table=col1,col2, got {spec!r}")
        schema, name = parse_table_name(table)
        keys[f"{schema}.{name}"] = names
    return keys


def inspect_tables(
    cursor: Any,
    tables: Sequence[str],
    *,
    keys: Mapping[str, Sequence[str]] | None = None,
    logical: bool = True,
) -> list[TableInfo]:
    """Check the database and the ``tables`` (``schema.table``); their key columns and
    replica identity. ``keys`` gives key columns for tables without a primary key. Without
    ``logical`` (trigger-based capture), wal_level and the replication privilege are not
    checked."""
    if logical:
        _check_logical(cursor)
    return [_inspect_table(cursor, name, keys or {}, logical) for name in tables]


def _check_logical(cursor: Any) -> None:
    cursor.execute("SHOW wal_level")
    (wal_level,) = cursor.fetchone()
    if wal_level != "logical":
        raise CaptureSetupError(
            f"wal_level is {wal_level!r}; logical decoding needs 'logical': set wal_level = "
            "logical in postgresql.conf (or ALTER SYSTEM SET wal_level = logical) and restart "
            "PostgreSQL"
        )
    cursor.execute("SELECT rolsuper OR rolreplication FROM pg_roles WHERE rolname = current_user")
    (may_replicate,) = cursor.fetchone()
    if not may_replicate:
        raise CaptureSetupError(
            "the user may not replicate: ALTER ROLE <user> WITH REPLICATION (or connect as a "
            "superuser)"
        )


def _inspect_table(
    cursor: Any, name: str, keys: Mapping[str, Sequence[str]], logical: bool
) -> TableInfo:
    schema, table = parse_table_name(name)
    cursor.execute(
        "SELECT c.oid, c.relreplident FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')",
        (schema, table),
    )
    row = cursor.fetchone()
    if row is None:
        raise CaptureSetupError(f"table {schema}.{table} does not exist")
    oid, identity = row
    cursor.execute("SELECT has_table_privilege(%s, 'SELECT')", (oid,))
    if not cursor.fetchone()[0]:
        raise CaptureSetupError(
            f"the user may not read {schema}.{table} (the snapshot needs SELECT): "
            f"GRANT SELECT ON {schema}.{table} TO <user>"
        )
    cursor.execute(
        "SELECT a.attname FROM pg_index i "
        "JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, position) ON true "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
        "WHERE i.indrelid = %s AND i.indisprimary ORDER BY k.position",
        (oid,),
    )
    key_columns = tuple(r[0] for r in cursor.fetchall())
    given = keys.get(f"{schema}.{table}")
    if given and tuple(given) != key_columns:
        if logical and identity != "f":
            # Updates and deletes carry the old values of the replica identity only: other
            # key columns would be unknown (and without any identity PostgreSQL refuses
            # updates and deletes on a published table).
            raise CaptureSetupError(
                f"--key {schema}.{table}={','.join(given)} needs the whole old row: "
                f"ALTER TABLE {schema}.{table} REPLICA IDENTITY FULL"
            )
        key_columns = tuple(given)
    if not key_columns:
        raise CaptureSetupError(
            f"table {schema}.{table} has no primary key: add one, or name the key "
            f"columns (--key {schema}.{table}=col1,col2)"
        )
    return TableInfo(
        schema=schema, table=table, key_columns=key_columns, replica_identity=str(identity)
    )


def ensure_publication(cursor: Any, name: str, tables: Sequence[TableInfo]) -> None:
    """Create publication ``name`` for ``tables``, or add the ones it lacks."""
    cursor.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,))
    listed = ", ".join(quoted_name(t) for t in tables)
    if cursor.fetchone() is None:
        cursor.execute(f"CREATE PUBLICATION {identifier(name)} FOR TABLE {listed}")
        return
    cursor.execute(
        "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s", (name,)
    )
    present = {(schema, table) for schema, table in cursor.fetchall()}
    missing = [t for t in tables if (t.schema, t.table) not in present]
    if missing:
        added = ", ".join(quoted_name(t) for t in missing)
        cursor.execute(f"ALTER PUBLICATION {identifier(name)} ADD TABLE {added}")


def quoted_name(table: TableInfo) -> str:
    """``"schema"."table"``, quoted for SQL."""
    return f"{identifier(table.schema)}.{identifier(table.table)}"


def identifier(name: str) -> str:
    """A SQL identifier, quoted."""
    return '"' + name.replace('"', '""') + '"'
