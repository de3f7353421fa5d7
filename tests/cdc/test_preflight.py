"""The capture's pre-flight checks against a real PostgreSQL: each mistake a clear error."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg2
import pytest

from riverbed.cdc.errors import CaptureSetupError
from riverbed.cdc.preflight import (
    ensure_publication,
    inspect_tables,
    parse_table_name,
)
from riverbed.testing.postgres import PostgresCluster


@pytest.fixture
def cursor(postgres: PostgresCluster) -> Iterator[Any]:
    connection = psycopg2.connect(postgres.dsn)
    connection.autocommit = True
    cursor = connection.cursor()
    cursor.execute(
        "DROP TABLE IF EXISTS orders, events, audit CASCADE; "
        "DROP PUBLICATION IF EXISTS catalog_test; DROP ROLE IF EXISTS reader; "
        "CREATE TABLE orders (region text, order_id int, total numeric, "
        "PRIMARY KEY (order_id, region)); "
        "CREATE TABLE events (id int PRIMARY KEY, body text); "
        "ALTER TABLE events REPLICA IDENTITY FULL; "
        "CREATE TABLE audit (at timestamptz, what text)"
    )
    try:
        yield cursor
    finally:
        connection.close()


def test_key_columns_in_key_order_and_the_replica_identity(cursor: Any) -> None:
    orders, events = inspect_tables(cursor, ["public.orders", "events"])
    assert (orders.qualified, orders.key_columns, orders.replica_identity) == (
        "public.orders",
        ("order_id", "region"),
        "d",
    )
    assert (events.key_columns, events.replica_identity) == (("id",), "f")


def test_a_table_without_primary_key_needs_a_given_key(cursor: Any) -> None:
    with pytest.raises(CaptureSetupError, match=r"audit has no primary key.*--key"):
        inspect_tables(cursor, ["public.audit"])
    keys = {"public.audit": ["at", "what"]}
    # Updates and deletes would carry no old values to key them by.
    with pytest.raises(CaptureSetupError, match=r"audit REPLICA IDENTITY FULL"):
        inspect_tables(cursor, ["public.audit"], keys=keys)
    (audit,) = inspect_tables(cursor, ["public.audit"], keys=keys, logical=False)  # triggers
    assert audit.key_columns == ("at", "what")
    cursor.execute("ALTER TABLE audit REPLICA IDENTITY FULL")
    (audit,) = inspect_tables(cursor, ["public.audit"], keys=keys)
    assert audit.key_columns == ("at", "what") and audit.replica_identity == "f"


def test_unknown_table_and_bad_names(cursor: Any) -> None:
    with pytest.raises(CaptureSetupError, match=r"public\.nope does not exist"):
        inspect_tables(cursor, ["public.nope"])
    with pytest.raises(CaptureSetupError, match=r"schema\.table"):
        parse_table_name("a.b.c")


def test_a_user_who_may_not_replicate_or_read(cursor: Any, postgres: PostgresCluster) -> None:
    cursor.execute("CREATE ROLE reader LOGIN")
    connection = psycopg2.connect(postgres.dsn.replace("postgres@", "reader@", 1))
    try:
        with pytest.raises(CaptureSetupError, match="WITH REPLICATION"):
            inspect_tables(connection.cursor(), ["public.events"])
        cursor.execute("ALTER ROLE reader WITH REPLICATION")
        with pytest.raises(CaptureSetupError, match=r"GRANT SELECT ON public\.events"):
            inspect_tables(connection.cursor(), ["public.events"])
    finally:
        connection.close()


def test_wal_level_must_be_logical(cursor: Any) -> None:
    class Replica:
        """A cursor of a server with wal_level=replica (the server here is logical)."""

        def execute(self, query: str, *args: object) -> None:
            assert query == "SHOW wal_level"

        def fetchone(self) -> tuple[str]:
            return ("replica",)

    with pytest.raises(CaptureSetupError, match=r"wal_level is 'replica'.*restart"):
        inspect_tables(Replica(), ["public.events"])


def test_the_publication_is_created_then_completed(cursor: Any) -> None:
    orders, events = inspect_tables(cursor, ["public.orders", "public.events"])
    ensure_publication(cursor, "catalog_test", [orders])
    ensure_publication(cursor, "catalog_test", [orders, events])
    ensure_publication(cursor, "catalog_test", [orders, events])  # nothing left to add
    cursor.execute(
        "SELECT tablename FROM pg_publication_tables WHERE pubname = 'catalog_test' "
        "ORDER BY tablename"
    )
    assert [r[0] for r in cursor.fetchall()] == ["events", "orders"]
