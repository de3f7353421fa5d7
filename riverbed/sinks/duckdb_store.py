"""The analytics copy: a DuckDB store (DESIGN.md, "Derived data").

- One table per input topic, named after the topic's last dot-separated part
  (:func:`~riverbed.sinks.changes.collection_of_topic`: ``shop.public.users`` -> ``users``),
  for CDC topics and changelogs alike. Its primary key is the record key's fields; its
  columns are the key's fields, then the row's. The table is created at its first row.
- Column types are inferred from the values, and a column widened where a value does not
  fit its type, as :mod:`~riverbed.sinks.duckdb_types` describes. A column that appears later
  is added (``ALTER TABLE ADD COLUMN``). A primary-key column cannot change type in place in
  DuckDB: its table is rebuilt (copied into a new table, which then takes the old one's name).
- A row replaces the row with its key: a column missing from it becomes NULL, except a column
  whose value did not come with the change (an unchanged TOAST value), which keeps the value
  it has (NULL in a new row). A delete or tombstone deletes the key; a truncate deletes every
  row of the table. A delete for a table that does not exist yet does nothing.

Batching: a batch is first collapsed to the last change per (table, key) by a
:class:`~riverbed.sinks.duckdb_staging.DuckDBStager`, which needs no database: the sink runs
it where it decodes the batch (:meth:`DuckDBStore.stager`, :meth:`DuckDBStore.apply_staged`;
:meth:`DuckDBStore.apply` does both). Each key ends as one delete or one upsert, and their
order no longer matters. Per table, a truncate deletes its rows first; a new column is added
(the rows before it have it NULL); the values are checked column by column (a retype where
one does not fit: a column's "first value" is its first in the collapsed batch); the deletes
go as one ``DELETE ... USING`` and the upserts (grouped by their set of unavailable columns,
almost always one group) as one ``INSERT ... SELECT ... ON CONFLICT DO UPDATE``, both over an
Arrow table.

The rows and the positions (table :data:`POSITIONS_TABLE`) go in one transaction: ``apply``
begins it, ``commit`` writes the positions and commits. A crash or :meth:`DuckDBStore.close`
before ``commit`` loses both (DuckDB's WAL replays committed transactions only); a failed
statement rolls the whole transaction back. DuckDB lets one process write a file: while the
sink runs, no other process can open it; after, any DuckDB client can query it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from riverbed.sinks.changes import Change, SinkError
from riverbed.sinks.duckdb_staging import (
    POSITIONS_TABLE,
    DuckDBStager,
    StagedTable,
    Upserts,
    wrong_key,
)
from riverbed.sinks.duckdb_types import (
    TIMESTAMP_FORMAT,
    Column,
    Kind,
    all_fit,
    arrow_array,
    cast_sql,
    decimal_for,
    id_part,
    infer,
    key_fits,
    kind_of,
)
from riverbed.sinks.store import Positions, TopicPartition

__all__ = ["POSITIONS_TABLE", "DuckDBStore", "open_read_only"]

_REBUILT = "riverbed_sink_rebuilt"
_STAGED = "riverbed_sink_staged"
_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}
"""DuckDB would otherwise download an extension to read a SQLite file given as the database."""


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _reason(error: Exception) -> str:
    """DuckDB's message, one line: ``IO Error: Cannot open file "x": Not a directory``."""
    line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return line.split(" See also ")[0]


@dataclass(slots=True)
class _Table:
    name: str
    key: tuple[str, ...]
    columns: dict[str, Column]


class DuckDBStore:
    """See the module docstring. ``read_only``: for reading (:meth:`positions`, :meth:`rows`)
    while no sink runs; such a store refuses :meth:`apply` and :meth:`commit`.

    One thread: the runner's. A method's DuckDB error is a one-line
    :class:`~riverbed.sinks.changes.SinkError` after the transaction is rolled back."""

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        self.name = str(path)
        self._path = Path(path)
        self._read_only = read_only
        self._connection: duckdb.DuckDBPyConnection | None = None
        self._tables: dict[str, _Table] = {}  # by lower-case name: DuckDB's names ignore case
        self._in_transaction = False
        if not read_only:
            threading.Thread(target=_warm_arrow, name="riverbed-warm-arrow", daemon=True).start()

    def open(self) -> None:
        if self._connection is not None:
            return
        self._check_header()
        try:
            connection = duckdb.connect(self.name, read_only=self._read_only, config=_CONFIG)
        except duckdb.Error as e:
            raise SinkError(f"cannot open the DuckDB database {self.name}: {_reason(e)}") from None
        try:
            connection.execute("SET TimeZone = 'UTC'")
            if not self._read_only:
                connection.execute(
                    f"CREATE TABLE IF NOT EXISTS {POSITIONS_TABLE} (topic VARCHAR, "
                    "partition INTEGER, next_offset BIGINT, PRIMARY KEY (topic, partition))"
                )
            self._connection = connection
            self._tables = self._load_tables()
        except duckdb.Error as e:
            self._connection = None
            connection.close()
            raise SinkError(f"cannot open the DuckDB database {self.name}: {_reason(e)}") from None

    def positions(self) -> dict[TopicPartition, int]:
        try:
            if POSITIONS_TABLE not in self._tables_in_file():
                return {}
            found = self._query(f"SELECT topic, partition, next_offset FROM {POSITIONS_TABLE}")
        except duckdb.Error as e:
            raise SinkError(f"DuckDB database {self.name}: {_reason(e)}") from None
        return {(topic, partition): offset for topic, partition, offset in found}

    def stager(self) -> DuckDBStager:
        """A new :class:`~riverbed.sinks.duckdb_staging.DuckDBStager`: it folds a batch
        where it is decoded, for :meth:`apply_staged`."""
        return DuckDBStager()

    def apply(self, changes: Sequence[Change]) -> None:
        stager = self.stager()
        for change in changes:
            stager.stage(change)
        self.apply_staged(stager.take())

    def apply_staged(self, staged: list[StagedTable]) -> None:
        """Apply a batch a :meth:`stager` folded; nothing is visible before :meth:`commit`."""
        connection = self._writable()
        try:
            if not self._in_transaction:
                connection.begin()
                self._in_transaction = True
            for table in staged:
                self._write(table)
        except (duckdb.Error, pa.ArrowException) as e:
            self._abort()
            raise SinkError(f"DuckDB database {self.name}: {_reason(e)}") from None
        except BaseException:
            self._abort()
            raise

    def commit(self, positions: Positions) -> None:
        connection = self._writable()
        try:
            if not self._in_transaction:
                connection.begin()
                self._in_transaction = True
            if positions:
                connection.executemany(
                    f"INSERT INTO {POSITIONS_TABLE} VALUES (?, ?, ?) ON CONFLICT (topic, partition)"
                    " DO UPDATE SET next_offset = excluded.next_offset",
                    [
                        [topic, partition, offset]
                        for (topic, partition), offset in positions.items()
                    ],
                )
            connection.commit()
            self._in_transaction = False
        except duckdb.Error as e:
            self._abort()
            raise SinkError(f"DuckDB database {self.name}: {_reason(e)}") from None

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        try:
            if self._in_transaction:
                connection.rollback()
        finally:
            self._in_transaction = False
            self._tables = {}
            connection.close()

    def rows(self, table: str) -> dict[str, dict[str, Any]]:
        """Every row of ``table``: row id (the primary-key values in key order, joined with
        ``:``; a string as it is, a timestamp and a decimal as the capture wrote them, anything
        else as its JSON text) -> column -> the value DuckDB gives ({} without the table)."""
        try:
            found = self._tables_in_file().get(table.lower())
            if found is None:
                return {}
            key = self._primary_key(found)
            cursor = self._require().execute(f"SELECT * FROM {_quote(found)}")
            names = [d[0] for d in cursor.description or ()]
            stored = cursor.fetchall()
        except duckdb.Error as e:
            raise SinkError(f"DuckDB database {self.name}: {_reason(e)}") from None
        if not key:
            raise SinkError(f"DuckDB database {self.name}: table {found} has no primary key")
        result: dict[str, dict[str, Any]] = {}
        for values in stored:
            row = dict(zip(names, values, strict=True))
            result[":".join(id_part(row[name]) for name in key)] = row
        return result

    # -- writing a batch --------------------------------------------------------------------

    def _write(self, staged: StagedTable) -> None:
        """Write what a batch does to one table (:class:`StagedTable`): a truncate, a retype
        where a value does not fit, the deletes, then the upserts, one statement per set of
        unavailable columns."""
        table = self._tables.get(staged.name.lower())
        if staged.truncate and table is not None:
            self._execute(f"DELETE FROM {_quote(table.name)}")
        if table is None:
            if not staged.upserts:
                return  # deletes in a table that does not exist yet
            table = self._create(staged)
        deletes = staged.deletes
        if staged.key and staged.key != table.key:  # () for a truncate alone
            if set(staged.key) != set(table.key):
                raise wrong_key(staged.topic, staged.key, table.name, table.key)
            order = [staged.key.index(k) for k in table.key]
            deletes = [tuple(key[i] for i in order) for key in deletes]
        for upserts in staged.upserts:
            for name, values in zip(upserts.names, upserts.columns, strict=True):
                if name not in table.columns:
                    first = next((v for v in values if v is not None), None)
                    self._add_column(table, name, infer(first))
            for name in upserts.unavailable - table.columns.keys():
                self._add_column(table, name, Column(Kind.VARCHAR, untyped=True))
        names = list(table.columns)
        rows = sum(upserts.rows for upserts in staged.upserts)
        columns = [_column(staged.upserts, name) for name in names]
        for name, values in zip(names, columns, strict=True):
            if not all_fit(table.columns[name], values):
                self._settle(table, name, values)
        quoted = _quote(table.name)
        if deletes:
            key_columns = [table.columns[k] for k in table.key]
            deletes = [
                key
                for key in deletes
                if all(key_fits(c, v) for c, v in zip(key_columns, key, strict=True))
            ]  # a key value that does not fit its column's type is in no row
        if deletes:
            where = " AND ".join(
                f"{quoted}.{_quote(k)} = {cast_sql(table.columns[k], f'{_STAGED}._{i}')}"
                for i, k in enumerate(table.key)
            )
            arrow = self._arrow(table, table.key, [list(c) for c in zip(*deletes, strict=True)])
            self._run_staged(f"DELETE FROM {quoted} USING {_STAGED} WHERE {where}", arrow)
        if not rows:
            return
        arrow = self._arrow(table, names, columns)
        selected = ", ".join(cast_sql(table.columns[n], f"_{i}") for i, n in enumerate(names))
        insert = (
            f"INSERT INTO {quoted} ({', '.join(map(_quote, names))}) SELECT {selected} "
            f"FROM {_STAGED} ON CONFLICT ({', '.join(map(_quote, table.key))})"
        )
        offset = 0
        for upserts in staged.upserts:
            updated = [n for n in names if n not in table.key and n not in upserts.unavailable]
            action = ", ".join(f"{_quote(n)} = excluded.{_quote(n)}" for n in updated)
            action = f"DO UPDATE SET {action}" if action else "DO NOTHING"
            self._run_staged(f"{insert} {action}", arrow.slice(offset, upserts.rows))
            offset += upserts.rows

    def _create(self, staged: StagedTable) -> _Table:
        """The table for ``staged``'s rows: its key's columns, then the others, typed by the
        first row's values."""
        if not staged.key:
            raise SinkError(
                f"{staged.topic}: a row without key fields cannot make table {staged.name}"
            )
        first = staged.upserts[0]
        values = dict(zip(first.names, (column[0] for column in first.columns), strict=True))
        columns = {c: infer(values.get(c)) for c in (*staged.key, *values)}
        for column in first.unavailable:
            columns.setdefault(column, Column(Kind.VARCHAR, untyped=True))
        definitions = ", ".join(f"{_quote(c)} {column.sql()}" for c, column in columns.items())
        primary = ", ".join(map(_quote, staged.key))
        self._execute(
            f"CREATE TABLE {_quote(staged.name)} ({definitions}, PRIMARY KEY ({primary}))"
        )
        table = _Table(staged.name, staged.key, columns)
        self._tables[staged.name.lower()] = table
        return table

    def _add_column(self, table: _Table, name: str, column: Column) -> None:
        self._execute(f"ALTER TABLE {_quote(table.name)} ADD COLUMN {_quote(name)} {column.sql()}")
        table.columns[name] = column

    def _settle(self, table: _Table, name: str, values: list[Any]) -> None:
        """Retype column ``name`` so that it takes all of ``values``: an untyped column gets
        its first value's type, a DECIMAL a greater scale, any other one VARCHAR."""
        column = table.columns[name]
        given = [v for v in values if v is not None]
        quoted = _quote(name)
        if column.untyped is not False:
            inferred = infer(given[0])
            if column.untyped is None and inferred.kind is not Kind.VARCHAR:
                count = self._query(f"SELECT count({quoted}) FROM {_quote(table.name)}")
                column.untyped = count[0][0] == 0
            if not column.untyped or inferred.kind is Kind.VARCHAR:
                column.untyped = False
                return
            if not all_fit(inferred, given):
                inferred = decimal_for(given, whole=0) or Column(Kind.VARCHAR)
            if inferred.kind is Kind.VARCHAR:
                column.untyped = False
            else:
                self._retype(table, name, inferred, quoted)
            return
        if column.kind is Kind.DECIMAL:
            largest = self._query(f"SELECT max(abs({quoted})) FROM {_quote(table.name)}")[0][0]
            decimal_column = decimal_for(given, whole=len(str(int(largest or 0))))
            if decimal_column is not None:
                decimal_column.scale = max(decimal_column.scale, column.scale)
                if all_fit(decimal_column, given):
                    self._retype(table, name, decimal_column, quoted)
                    return
        if column.kind is Kind.TIMESTAMPTZ:
            render = f"strftime({quoted}, '{TIMESTAMP_FORMAT}')"
        else:
            render = f"CAST({quoted} AS VARCHAR)"
        self._retype(table, name, Column(Kind.VARCHAR), render)

    def _retype(self, table: _Table, name: str, column: Column, expression: str) -> None:
        """Change a column's type, its values becoming ``expression``."""
        quoted = _quote(table.name)
        if name not in table.key:
            self._execute(
                f"ALTER TABLE {quoted} ALTER COLUMN {_quote(name)} TYPE {column.sql()} "
                f"USING {expression}"
            )
            table.columns[name] = column
            return
        # DuckDB: "Cannot change the type of a column that has a UNIQUE or PRIMARY KEY
        # constraint specified". So: a copy of the table, which then takes its name.
        columns = {**table.columns, name: column}
        definitions = ", ".join(f"{_quote(c)} {col.sql()}" for c, col in columns.items())
        selected = ", ".join(expression if c == name else _quote(c) for c in columns)
        primary = ", ".join(map(_quote, table.key))
        self._execute(f"CREATE TABLE {_REBUILT} ({definitions}, PRIMARY KEY ({primary}))")
        self._execute(f"INSERT INTO {_REBUILT} SELECT {selected} FROM {quoted}")
        self._execute(f"DROP TABLE {quoted}")
        self._execute(f"ALTER TABLE {_REBUILT} RENAME TO {quoted}")
        table.columns = columns

    def _arrow(self, table: _Table, names: Sequence[str], columns: list[list[Any]]) -> Any:
        """``columns`` (the values of ``table``'s columns ``names``) as an Arrow table whose
        columns are ``_0``, ``_1``, ..."""
        arrays = [
            arrow_array(table.columns[n], values) for n, values in zip(names, columns, strict=True)
        ]
        return pa.table(arrays, names=[f"_{i}" for i in range(len(arrays))])

    def _run_staged(self, sql: str, staged: Any) -> None:
        """Run ``sql`` with the Arrow table ``staged`` as :data:`_STAGED`."""
        connection = self._require()
        connection.register(_STAGED, staged)
        try:
            connection.execute(sql)
        finally:
            connection.unregister(_STAGED)

    # -- the connection ---------------------------------------------------------------------

    def _check_header(self) -> None:
        """A file that is not a DuckDB database (its magic ``DUCK`` at byte 8), said plainly."""
        try:
            with self._path.open("rb") as file:
                header = file.read(12)
        except OSError:
            return  # no such file (a new database), or DuckDB says why it cannot open it
        if header[8:12] != b"DUCK":
            raise SinkError(
                f"cannot open the DuckDB database {self.name}: not a DuckDB database file"
            )

    def _load_tables(self) -> dict[str, _Table]:
        tables: dict[str, _Table] = {}
        described = self._query(
            "SELECT table_name, column_name, data_type, numeric_scale FROM duckdb_columns() "
            "WHERE schema_name = 'main' AND database_name = current_database() "
            "ORDER BY table_name, column_index"
        )
        by_table: dict[str, dict[str, Column]] = {}
        for table, name, data_type, scale in described:
            kind = kind_of(data_type)
            untyped = None if kind is Kind.VARCHAR else False
            by_table.setdefault(table, {})[name] = Column(kind, scale=scale or 0, untyped=untyped)
        for table, columns in by_table.items():
            if table.lower() != POSITIONS_TABLE:
                tables[table.lower()] = _Table(table, self._primary_key(table), columns)
        return tables

    def _primary_key(self, table: str) -> tuple[str, ...]:
        found = self._query(
            "SELECT constraint_column_names FROM duckdb_constraints() WHERE schema_name = 'main' "
            "AND database_name = current_database() AND table_name = ? "
            "AND constraint_type = 'PRIMARY KEY'",
            [table],
        )
        return tuple(found[0][0]) if found else ()

    def _tables_in_file(self) -> dict[str, str]:
        found = self._query(
            "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' "
            "AND database_name = current_database()"
        )
        return {name.lower(): name for (name,) in found}

    def _abort(self) -> None:
        """After a failed statement: nothing of the transaction stays, in the file or here."""
        connection = self._require()
        try:
            if self._in_transaction:
                self._in_transaction = False
                connection.rollback()
            self._tables = self._load_tables()
        except duckdb.Error:  # the connection is gone: so is the transaction
            self._connection, self._tables = None, {}
            connection.close()

    def _require(self) -> duckdb.DuckDBPyConnection:
        if self._connection is None:
            raise SinkError(f"the DuckDB database {self.name} is not open")
        return self._connection

    def _writable(self) -> duckdb.DuckDBPyConnection:
        if self._read_only:
            raise SinkError(f"the DuckDB database {self.name} is open read-only")
        return self._require()

    def _execute(self, sql: str) -> None:
        self._require().execute(sql)

    def _query(self, sql: str, parameters: list[Any] | None = None) -> list[Any]:
        return self._require().execute(sql, parameters).fetchall()


def open_read_only(path: str | Path) -> DuckDBStore:
    """A store open for reading (``riverbed sink verify``), while no sink writes the file."""
    store = DuckDBStore(path, read_only=True)
    store.open()
    return store


def _warm_arrow() -> None:
    """pyarrow imports pandas (0.25-0.33 s) at its first array made from Python values: in a
    thread that a writable store starts when it is made, rather than in the sink's first
    batch."""
    pa.array([0])


def _column(groups: list[Upserts], name: str) -> list[Any]:
    """Column ``name`` of every group's rows, in order (None where a group has no such
    column)."""
    values: list[Any] = []
    for group in groups:
        if name in group.names:
            values += group.columns[group.names.index(name)]
        else:
            values += [None] * group.rows
    return values
