"""The riverbed broker: an asyncio server speaking the Kafka wire protocol over ``riverbed.log``.

``Broker`` runs it in-process (notebooks, tests); ``riverbed broker`` runs it as a command.

How a request travels, and where each part lives:

- :mod:`~riverbed.broker.broker` (``Broker``, on its own thread) and
  :mod:`~riverbed.broker.server` (the listening socket, the data directory, start-up and
  shutdown), configured by :mod:`~riverbed.broker.config` (Kafka's broker setting names);
- :mod:`~riverbed.broker.connection` — one client connection: frames in, responses out in
  request order (``riverbed.protocol`` decodes and encodes them);
- :mod:`~riverbed.broker.dispatch` — which handler serves which API key;
- :mod:`~riverbed.broker.handlers` — one module per API family, each a thin translation
  between the wire and the broker's state, :class:`~riverbed.broker.state.BrokerState`;
- :mod:`~riverbed.broker.groups` — the group coordinator (classic and KIP-848 consumer
  groups) and the committed offsets in ``__consumer_offsets``;
- :mod:`~riverbed.broker.txn` — the transaction coordinator and ``__transaction_state``;
- :mod:`~riverbed.broker.internal_topics` — what those two internal topics share: creation,
  partitioning by key, appending, replay, the JSON of their records;
- services the handlers share: :mod:`~riverbed.broker.flusher` (one fsync for many
  ``acks=all`` requests), :mod:`~riverbed.broker.purgatory` (long-polling fetches),
  :mod:`~riverbed.broker.log_maintenance` (retention and the log cleaner);
- :mod:`~riverbed.broker.errors` — the one mapping from failures to Kafka error codes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from riverbed.broker.broker import Broker

__all__ = ["Broker"]


def __getattr__(name: str) -> Any:
    """``Broker`` on first use: every ``riverbed`` command imports
    :mod:`riverbed.broker.config` (``riverbed broker``'s options), and that loads none of the
    broker then."""
    if name == "Broker":
        from riverbed.broker.broker import Broker

        return Broker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
