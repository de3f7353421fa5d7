"""riverbed.client: what riverbed's programs share to talk to Kafka brokers, beside
confluent-kafka (the project's client).

Two modules build on confluent-kafka: ``reading`` reads a topic's partitions to their end
(``read_to_end``; the event-sourcing processor and readers, the tests, the benchmarks and
the demo use it), and ``partitioner`` computes the partition Kafka's Java clients choose for
a key (``murmur2_partition``; the CDC capture and the event-sourcing processor use it).

The rest is riverbed's own small Kafka client, for what confluent-kafka cannot send: the
transaction admin requests (ListTransactions, DescribeTransactions) that ``riverbed
transactions`` makes, and the single frames, pipelined requests and raw bytes that the
broker's wire-level tests send. It speaks to any Kafka broker (versions are negotiated with
ApiVersions), not only to riverbed's. It may import ``riverbed.protocol`` (whose
``client_codec`` is its codec) and kio, never the broker or the log.

- ``BrokerConnection``: one blocking socket to one broker; ``request`` sends a kio request
  and returns the answer's body, ``send``/``receive`` pipeline (``connection``).
- ``connect``: a ``BrokerConnection`` to the first broker of a bootstrap list that accepts
  one, retried until a deadline; ``split_address`` reads ``HOST:PORT`` (``connection``).
- ``TransactionAdmin``: ``list_transactions`` and ``describe_transactions`` across a cluster,
  answered with plain values (``transactions``).

Exceptions (``errors``)::

    ClientError                   base of every error this package raises on purpose
    ├── InvalidAddressError       not HOST:PORT, or an empty bootstrap list (a ValueError too)
    ├── UnsupportedApiError       the broker serves no version of an API in the range we speak
    ├── BrokerUnreachableError    no broker of the bootstrap list accepted a connection in time
    ├── RequestFailedError        no usable answer from one broker (the message says why)
    ├── ErrorResponseError        a broker answered with an error code retrying does not cure
    └── UnsupportedFilterError    a filter needs a newer version than a broker serves

``BrokerConnection`` and ``connect`` also let the socket's ``OSError`` and
``riverbed.protocol.MalformedResponseError`` through, as a socket library does;
``TransactionAdmin`` turns them into ``BrokerUnreachableError`` and ``RequestFailedError``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from riverbed.client.errors import (
    BrokerUnreachableError,
    ClientError,
    ErrorResponseError,
    InvalidAddressError,
    RequestFailedError,
    UnsupportedApiError,
    UnsupportedFilterError,
)

if TYPE_CHECKING:
    from riverbed.client.connection import BrokerConnection, connect, split_address
    from riverbed.client.transactions import (
        ListFilters,
        ListResult,
        TransactionAdmin,
        TransactionDescription,
        TransactionListing,
        error_name,
    )

_LAZY = {
    "riverbed.client.connection": ("BrokerConnection", "connect", "split_address"),
    "riverbed.client.transactions": (
        "ListFilters", "ListResult", "TransactionAdmin", "TransactionDescription",
        "TransactionListing", "error_name",
    ),
}  # fmt: skip


def __getattr__(name: str) -> Any:
    """The names of ``connection`` and ``transactions`` on first use: ``reading`` and
    ``partitioner``, which the CDC capture and the processors use, then load no kio."""
    for module, names in _LAZY.items():
        if name in names:
            return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = (
    "BrokerConnection",
    "BrokerUnreachableError",
    "ClientError",
    "ErrorResponseError",
    "InvalidAddressError",
    "ListFilters",
    "ListResult",
    "RequestFailedError",
    "TransactionAdmin",
    "TransactionDescription",
    "TransactionListing",
    "UnsupportedApiError",
    "UnsupportedFilterError",
    "connect",
    "error_name",
    "split_address",
)
