"""``riverbed sink verify``: do the derived stores agree with PostgreSQL?

Each round reads the tables (one ``REPEATABLE READ`` transaction, rows as the capture
writes them: :func:`riverbed.cdc.snapshot.copy_tables`) and each store's rows of those
tables, and compares them (:mod:`riverbed.sinks.verify`). It stops when every difference
of its first round is resolved (the store caught up, or the row changed since), or when
``--timeout-s`` has passed; then it prints, per store and table, the rows missing, extra
and different that persisted (with examples), and how many rows differ because they
changed while it watched (in flight, not judged). Exit 0 when all agree, 1 otherwise.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import orjson

from riverbed.cdc.errors import CdcError
from riverbed.cdc.preflight import TableInfo, connect, inspect_tables
from riverbed.cdc.snapshot import copy_tables
from riverbed.cli.arguments import add_command, add_number, positive_int
from riverbed.cli.errors import CliError
from riverbed.sinks.changes import SinkError, row_id_of
from riverbed.sinks.verify import Watch, comparable

__all__ = ["add_parser"]

_ROUND_S = 0.5
_EXAMPLES = 3


def add_parser(actions: Any) -> None:
    verify = add_command(
        actions,
        "verify",
        "compare PostgreSQL's tables with the derived stores",
        "Wait until every store has applied what PostgreSQL holds, then print per store and "
        "table the rows missing, extra and different. Exit 0 when all agree, 1 otherwise.",
    )
    verify.add_argument("--dsn", required=True, help="PostgreSQL URL or key=value DSN")
    verify.add_argument("--tables", required=True, metavar="S.T1,S.T2",
                        help="the tables the stores follow")  # fmt: skip
    verify.add_argument("--redis", metavar="URL", help="a Redis store")
    verify.add_argument("--index", metavar="DIR", help="a search index")
    verify.add_argument("--duckdb", metavar="FILE", help="a DuckDB database (its sink stopped)")
    add_number(verify, "--timeout-s", positive_int, 60,
               "how long to wait for the stores to catch up", metavar="N")  # fmt: skip
    verify.set_defaults(run=_verify)


class _Store:
    """A store as verify reads it: its rows of a table, in the form compared."""

    def __init__(
        self, label: str, rows: Callable[[str], dict[str, Any]], value: Callable[[Any], Any]
    ) -> None:
        self.label = label
        self.rows = rows
        self.value = value


def _stores(args: argparse.Namespace) -> tuple[list[_Store], list[Any]]:
    # The stores' modules here, those given only: every riverbed command imports this one,
    # and duckdb with pyarrow, redis and tantivy take 0.2 s to load.
    stores: list[_Store] = []
    opened: list[Any] = []
    if args.redis:
        from riverbed.sinks.redis_store import RedisStore, field_text

        redis_store = RedisStore(args.redis)
        redis_store.open()
        opened.append(redis_store)
        stores.append(_Store(f"redis {args.redis}", redis_store.rows, field_text))
    if args.index:
        from riverbed.sinks.search_store import SearchStore

        search = SearchStore(args.index, read_only=True)
        search.open()
        opened.append(search)
        stores.append(_Store(f"search {args.index}", search.rows, comparable))
    if args.duckdb:
        from riverbed.sinks.duckdb_store import DuckDBStore

        duck = DuckDBStore(args.duckdb, read_only=True)
        duck.open()
        opened.append(duck)
        stores.append(_Store(f"duckdb {args.duckdb}", duck.rows, comparable))
    return stores, opened


def _verify(args: argparse.Namespace) -> int:
    if not (args.redis or args.index or args.duckdb):
        raise CliError("give at least one store: --redis, --index or --duckdb", exit_code=2)
    names = [t.strip() for t in args.tables.split(",") if t.strip()]
    try:
        connection = connect(args.dsn, timeout_s=10)
    except CdcError as e:
        raise CliError(str(e)) from None
    opened: list[Any] = []
    try:
        try:
            tables = inspect_tables(connection.cursor(), names, logical=False)
            stores, opened = _stores(args)
        except (CdcError, SinkError) as e:
            raise CliError(str(e)) from None
        watches = {(s.label, t.table): Watch() for s in stores for t in tables}
        deadline = time.monotonic() + args.timeout_s
        while True:
            source = _source_rows(connection, tables)
            for store in stores:
                for table in tables:
                    try:
                        found = store.rows(table.table)
                    except SinkError as e:
                        raise CliError(str(e)) from None
                    watches[(store.label, table.table)].look(
                        source[table.table], found, store.value
                    )
            settled = all(not w.persisting() for w in watches.values())
            if settled or time.monotonic() > deadline:
                break
            time.sleep(_ROUND_S)
    finally:
        for store in opened:
            store.close()
        connection.close()
    return _report(watches)


def _source_rows(connection: Any, tables: list[TableInfo]) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {t.table: {} for t in tables}

    def on_row(table: TableInfo, row: dict[str, Any], last: bool) -> None:
        key = {name: row[name] for name in table.key_columns}
        rows[table.table][row_id_of(key)] = row

    connection.set_session(isolation_level="REPEATABLE READ", readonly=True, autocommit=False)
    try:
        copy_tables(connection.cursor(), tables, on_row, say=lambda _: None, stopping=lambda: False)
    finally:
        connection.rollback()
    return rows


def _report(watches: dict[tuple[str, str], Watch]) -> int:
    agree = True
    for (label, table), watch in watches.items():
        persisting = watch.persisting()
        counts = {kind: sum(1 for d in persisting if d.kind == kind)
                  for kind in ("missing", "extra", "different")}  # fmt: skip
        flight = watch.in_flight()
        line = (
            f"{label} {table}: {watch.rows:,} rows; {counts['missing']} missing, "
            f"{counts['extra']} extra, {counts['different']} different"
        )
        if flight:
            line += f" ({flight} changing while verified, not judged)"
        print(line)
        for difference in persisting[:_EXAMPLES]:
            print(
                f"  {difference.kind} {difference.row_id}: expected "
                f"{_text(difference.expected)}, found {_text(difference.found)}"
            )
        agree = agree and not persisting
    print("all stores agree" if agree else "the stores do not agree")
    return 0 if agree else 1


def _text(row: Any) -> str:
    return "nothing" if row is None else orjson.dumps(row, default=str).decode()
