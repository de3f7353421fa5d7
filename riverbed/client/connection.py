"""A connection to one Kafka broker: send a kio request, read its response.

The socket half of riverbed's own Kafka client (``riverbed.protocol.client_codec`` is the
codec), for the requests confluent-kafka cannot send. ``BrokerConnection.request`` sends one
request and waits for its answer; ``send`` and ``receive`` pipeline several (the broker tests
do). ``version`` picks the highest version of an API that both sides speak, from the broker's
ApiVersions answer (asked once per connection, with v0, which every Kafka broker serves), so
the client works against a Kafka cluster as well as riverbed's broker. ``connect`` opens a
connection to the first answering broker of a ``--bootstrap`` list, retrying until a
deadline, as Kafka clients do while a broker starts up.

Every call blocks the calling thread for at most the socket's timeout; a connection is for
one thread at a time. The errors are the socket's (``OSError``: ``ConnectionRefusedError``,
``TimeoutError``, ...), ``ConnectionError`` when the broker closes the connection,
``MalformedResponseError`` (``riverbed.protocol``) for an answer that cannot be read,
``UnsupportedApiError`` when the broker serves no version of an API we speak, and
``InvalidAddressError`` for an address that is not ``HOST:PORT``.
"""

from __future__ import annotations

import socket
import time
from typing import Any, Self

from kio.schema.errors import ErrorCode

from riverbed.client.errors import InvalidAddressError, UnsupportedApiError
from riverbed.protocol import (
    ApiKey,
    MalformedResponseError,
    decode_response,
    encode_request,
    request_body,
)

__all__ = ("BrokerConnection", "connect", "split_address")

CLIENT_ID = "riverbed"  # the client.id sent with each request, which brokers log
# librdkafka's reconnect.backoff.ms (100) doubled per attempt; capped at 1 s (librdkafka
# goes to 10 s) so that a broker that comes up is found soon within a short deadline.
_FIRST_BACKOFF_S = 0.1
_MAX_BACKOFF_S = 1.0


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9092`` for IPv6) → (host, port); InvalidAddressError if
    malformed."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InvalidAddressError(f"not HOST:PORT: {address!r}")
    return host.strip("[]"), int(port)


class BrokerConnection:
    """One socket to one broker, one request at a time (or pipelined: ``send``, ``receive``)."""

    def __init__(self, sock: socket.socket, *, client_id: str | None = CLIENT_ID) -> None:
        self.sock = sock
        self.client_id = client_id
        self._next_correlation_id = 1
        self._versions: dict[int, tuple[int, int]] | None = None

    @classmethod
    def open(cls, address: str, *, timeout_s: float, client_id: str | None = CLIENT_ID) -> Self:
        """Connect to ``HOST:PORT``; ``timeout_s`` bounds the connect and every later call."""
        return cls(socket.create_connection(split_address(address), timeout=timeout_s),
                   client_id=client_id)  # fmt: skip

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def send(self, api_key: int, version: int, body: Any) -> int:
        """Send one request; its correlation id, to match the answer."""
        correlation_id = self._next_correlation_id
        self._next_correlation_id += 1
        self.sock.sendall(
            encode_request(api_key, version, correlation_id, body, client_id=self.client_id)
        )
        return correlation_id

    def send_raw(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def receive(self, api_key: int, version: int) -> tuple[int, Any]:
        """(correlation id, response body) of the next frame, read as ``api_key`` v``version``."""
        size = int.from_bytes(self._read_exactly(4), "big", signed=True)
        if size < 4:
            raise MalformedResponseError(f"response frame of {size} bytes")
        return decode_response(api_key, version, self._read_exactly(size))

    def request(self, api_key: int, version: int, body: Any) -> Any:
        """Send one request and return its answer's body."""
        sent = self.send(api_key, version, body)
        correlation_id, response = self.receive(api_key, version)
        if correlation_id != sent:
            raise MalformedResponseError(
                f"answer to request {correlation_id} where {sent} was expected"
            )
        return response

    def _read_exactly(self, size: int) -> bytes:
        chunks = []
        while size:
            chunk = self.sock.recv(min(size, 1 << 20))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def api_versions(self) -> dict[int, tuple[int, int]]:
        """The broker's (min, max) version of each API it serves (ApiVersions v0, asked once)."""
        if self._versions is None:
            answer = self.request(ApiKey.API_VERSIONS, 0, request_body(ApiKey.API_VERSIONS, 0))
            if answer.error_code != ErrorCode.none:
                raise MalformedResponseError(f"ApiVersions failed: {answer.error_code.name}")
            self._versions = {
                api.api_key: (api.min_version, api.max_version) for api in answer.api_keys
            }
        return self._versions

    def version(self, api_key: int, *, lowest: int, highest: int) -> int:
        """The highest version of ``api_key`` in ``lowest..highest`` the broker serves."""
        served = self.api_versions().get(api_key)
        if served is None or served[1] < lowest or served[0] > highest:
            text = "none" if served is None else f"v{served[0]}-{served[1]}"
            raise UnsupportedApiError(api_key, lowest=lowest, highest=highest, served=text)
        return min(highest, served[1])


def connect(
    bootstrap: str,
    *,
    connect_timeout_s: float,
    request_timeout_s: float,
    client_id: str | None = CLIENT_ID,
) -> BrokerConnection:
    """A connection to the first broker of ``bootstrap`` (``HOST:PORT[,HOST:PORT...]``) that
    accepts one, trying them in turn until ``connect_timeout_s`` has passed.

    Raises the last attempt's ``OSError`` when none did, and ``InvalidAddressError`` for a
    malformed list.
    """
    addresses = [address for address in bootstrap.split(",") if address.strip()]
    for address in addresses:
        split_address(address)  # a malformed address fails at once, not at the deadline
    if not addresses:
        raise InvalidAddressError("no bootstrap address")
    deadline = time.monotonic() + connect_timeout_s
    backoff_s = _FIRST_BACKOFF_S
    while True:
        for address in addresses:
            remaining_s = deadline - time.monotonic()
            try:
                connection = BrokerConnection.open(
                    address, timeout_s=max(remaining_s, 0.001), client_id=client_id
                )
            except OSError:
                if remaining_s <= 0:
                    raise
                continue
            connection.sock.settimeout(request_timeout_s)
            return connection
        time.sleep(max(0.0, min(backoff_s, deadline - time.monotonic())))
        backoff_s = min(backoff_s * 2, _MAX_BACKOFF_S)
