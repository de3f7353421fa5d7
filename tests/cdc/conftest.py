"""Fixtures of the CDC tests: a cursor on the session's PostgreSQL cluster (``postgres``,
in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg2
import pytest

from riverbed.testing.postgres import PostgresCluster


@pytest.fixture(scope="module")
def sql(postgres: PostgresCluster) -> Iterator[Any]:
    """An autocommit cursor on the cluster's ``postgres`` database, one per test module."""
    connection = psycopg2.connect(postgres.dsn)
    connection.autocommit = True
    try:
        yield connection.cursor()
    finally:
        connection.close()
