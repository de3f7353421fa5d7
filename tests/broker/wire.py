"""A minimal Kafka wire client for tests: kio encodes requests and decodes responses.

Real client libraries hide what the broker does on the wire (pipelining, acks=0, long
polls, error codes for corrupt input); this speaks it directly, one frame at a time.
"""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer


class WireClient:
    def __init__(self, bootstrap: str, *, timeout_s: float = 10) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self._next_correlation_id = 1

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @staticmethod
    def encode(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
        schema = type(body)
        header = struct.pack(">hhih", api_key, version, correlation_id, 5) + b"tests"
        if schema.__flexible__:
            header += b"\x00"  # request header v2: no tagged fields
        out = io.BytesIO()
        entity_writer(schema)(out, body)
        payload = header + out.getvalue()
        return struct.pack(">i", len(payload)) + payload

    def send(self, api_key: int, version: int, body: Any) -> int:
        correlation_id = self._next_correlation_id
        self._next_correlation_id += 1
        self.sock.sendall(self.encode(api_key, version, correlation_id, body))
        return correlation_id

    def send_raw(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def _read_exactly(self, size: int) -> bytes:
        chunks = []
        while size:
            chunk = self.sock.recv(size)
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def receive(self, api_key: int, version: int) -> tuple[int, Any]:
        """(correlation id, response body) of the next response frame."""
        (size,) = struct.unpack(">i", self._read_exactly(4))
        frame = self._read_exactly(size)
        (correlation_id,) = struct.unpack_from(">i", frame)
        schema = load_response_schema(api_key, version)
        offset = 4
        if schema.__header_schema__.__version__ == 1:
            offset += 1  # response header v1: an empty tagged-field section
        body, _ = entity_reader(schema)(frame, offset)
        return correlation_id, body

    def request(self, api_key: int, version: int, body: Any) -> Any:
        sent = self.send(api_key, version, body)
        correlation_id, response = self.receive(api_key, version)
        assert correlation_id == sent
        return response


def request_class(api_key: int, version: int) -> Any:
    return load_request_schema(api_key, version)
