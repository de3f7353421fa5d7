"""What every request handler may use: the logs, the configuration and the shared services."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from riverbed.broker.config import BrokerConfig, Listener
from riverbed.broker.flusher import GroupFlusher
from riverbed.broker.purgatory import FetchPurgatory
from riverbed.log.manager import LogManager

__all__ = ["BrokerState"]


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
