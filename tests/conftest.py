"""Fixtures shared by the whole suite: a real broker, in this process or as its own process
(tests.support.brokers; ``group_broker`` without the initial group rebalance delay), and one
private PostgreSQL cluster for the session (the CDC and workload tests')."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from riverbed.broker import Broker
from riverbed.testing.postgres import PostgresCluster
from tests.support.brokers import GROUPS_FAST, BrokerProcess, running_broker, start_broker_process


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    """A broker on 127.0.0.1, a free port, in this process."""
    with Broker(tmp_path / "data", listen="127.0.0.1:0") as running:
        yield running


@pytest.fixture
def broker_process(tmp_path: Path) -> Iterator[BrokerProcess]:
    """``riverbed broker`` as a real child process on a free port."""
    with start_broker_process(tmp_path / "data") as running:
        yield running


@pytest.fixture
def group_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """``riverbed broker`` as a child process, without the initial group rebalance delay."""
    yield from running_broker(tmp_path, *GROUPS_FAST)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    cluster = PostgresCluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
