"""Fixtures of the CDC tests: one private PostgreSQL cluster for the session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cdc.postgres import PostgresCluster


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    cluster = PostgresCluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
