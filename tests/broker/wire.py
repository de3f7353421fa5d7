"""A minimal Kafka wire client for tests: kio encodes requests and decodes responses.

Real client libraries hide what the broker does on the wire (pipelining, acks=0, long
polls, error codes for corrupt input); this speaks it directly, one frame at a time. The
framing and the codec are riverbed's own client's (``riverbed.cli.wire_client``, which
``riverbed transactions`` uses), so there is one implementation of them.
"""

from __future__ import annotations

import socket
from typing import Any

from kio.index import load_request_schema

from riverbed.cli.wire_client import BrokerConnection, split_address
from riverbed.cli.wire_codec import encode_request

CLIENT_ID = "tests"


class WireClient(BrokerConnection):
    """``send``, ``send_raw``, ``receive`` and ``request`` on one connection to ``bootstrap``;
    a closed connection raises ``ConnectionError``."""

    def __init__(self, bootstrap: str, *, timeout_s: float = 10) -> None:
        sock = socket.create_connection(split_address(bootstrap), timeout=timeout_s)
        super().__init__(sock, client_id=CLIENT_ID)

    @staticmethod
    def encode(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
        """A whole request frame, to send with ``send_raw`` (pipelined or tampered with)."""
        return encode_request(api_key, version, correlation_id, body, client_id=CLIENT_ID)


def request_class(api_key: int, version: int) -> Any:
    return load_request_schema(api_key, version)
