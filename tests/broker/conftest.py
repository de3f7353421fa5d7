"""Fixtures of the broker tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import BrokerProcess, start_broker_process

GROUPS_FAST = ("--set", "group.initial.rebalance.delay.ms=0")
"""Consumer-group tests need no initial rebalance delay (Kafka's 3 s would only slow them)."""


def running_broker(tmp_path: Path, *extra_args: str) -> Iterator[BrokerProcess]:
    """For a fixture to ``yield from``: ``riverbed broker`` as a child process with
    ``extra_args`` (``--set key=value`` ...), killed after the test."""
    running = start_broker_process(tmp_path / "data", extra_args=extra_args)
    try:
        yield running
    finally:
        running.kill()


@pytest.fixture
def group_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """``riverbed broker`` as a child process, without the initial group rebalance delay."""
    yield from running_broker(tmp_path, *GROUPS_FAST)
