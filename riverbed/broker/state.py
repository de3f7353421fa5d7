"""What every request handler may use: the logs, the configuration and the shared services."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass

from riverbed.broker.config import BrokerConfig, Listener
from riverbed.broker.flusher import GroupFlusher
from riverbed.broker.groups.coordinator import GroupCoordinator
from riverbed.broker.metrics import BrokerMetrics
from riverbed.broker.purgatory import FetchPurgatory
from riverbed.broker.txn import TransactionCoordinator
from riverbed.log import LogManager

__all__ = ["CLIENT_HOST", "BrokerState"]

CLIENT_HOST: ContextVar[str] = ContextVar("client_host", default="")
"""The address of the client whose request is being handled (set per connection; Kafka
reports it as ``client_host`` in DescribeGroups)."""


@dataclass(slots=True, kw_only=True)
class BrokerState:
    """One broker's state, shared by its connections on one event loop."""

    config: BrokerConfig
    logs: LogManager
    flusher: GroupFlusher
    purgatory: FetchPurgatory
    cluster_id: str
    advertised: Listener
    clock: Callable[[], int]
    """Wall-clock milliseconds since the epoch (passed in so tests can control it)."""
    groups: GroupCoordinator
    """Consumer groups of both protocols and their committed offsets
    (``riverbed.broker.groups``)."""
    txns: TransactionCoordinator
    """Transactional ids and their transactions (``riverbed.broker.txn``)."""
    metrics: BrokerMetrics
    """What ``GET /metrics`` reports (``riverbed.broker.metrics``)."""
