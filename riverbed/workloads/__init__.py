"""Workload generators: data that looks like a real shop's, to drive CDC and the pipelines.

- :mod:`riverbed.workloads.cast`: the shop's users (with their cards), products and pages,
  made from the seed;
- :mod:`riverbed.workloads.shop`: the clickstream (``page_views``, ``searches``, ``clicks``,
  ``payments``) in arrival order, out of order and with late stragglers;
- :mod:`riverbed.workloads.oltp`: the writes of the shop's database (``users``, ``products``,
  ``orders``) as row operations;
- :mod:`riverbed.workloads.cart_commands`: shoppers' commands to the event-sourced carts
  (``shop.carts.commands``), with racing clients, invalid commands and retries;
- :mod:`riverbed.workloads.playback`: the I/O, the workload played in real time: events and
  cart commands to topics (confluent-kafka) and operations to PostgreSQL
  (:mod:`riverbed.workloads.database`, psycopg2), interleaved by event time and paced.

The generators do no I/O and read no clock: the same :class:`~riverbed.workloads.shop.
ShopConfig` gives the same events, operations and commands, every time.

Exceptions: :class:`WorkloadError` is the package's one failure (a broker or a database that
cannot be reached, an event not delivered); :class:`ConfigError`, a subclass (and a
``ValueError``), says a setting is out of range — the caller's mistake.
"""

from __future__ import annotations

__all__ = ["ConfigError", "WorkloadError"]


class WorkloadError(Exception):
    """The workload cannot go on; the message says why, in one line."""


class ConfigError(WorkloadError, ValueError):
    """A setting is out of range (the message names it)."""
