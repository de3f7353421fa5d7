"""A minimal Kafka wire client for tests: riverbed's own client, with the client id "tests".

Real client libraries hide what the broker does on the wire (pipelining, acks=0, long
polls, error codes for corrupt input); ``riverbed.client.BrokerConnection`` speaks it
directly, one frame at a time, with ``riverbed.protocol``'s client codec, so there is one
implementation of both.
"""

from __future__ import annotations

import socket
from typing import Any

from riverbed.client import BrokerConnection, split_address
from riverbed.protocol import encode_request

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
