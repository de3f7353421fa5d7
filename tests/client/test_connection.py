"""``riverbed.client.connect``: a bootstrap list, retried until a broker listens."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from riverbed.client import connect, split_address
from tests.support.ports import free_port


def test_split_address() -> None:
    assert split_address("127.0.0.1:9092") == ("127.0.0.1", 9092)
    assert split_address(" [::1]:9093 ") == ("::1", 9093)
    for bad in ("localhost", ":9092", "host:", "host:port"):
        with pytest.raises(ValueError):
            split_address(bad)


def test_connect_waits_for_a_broker_that_starts_listening() -> None:
    port = free_port()
    server = socket.socket()
    server.bind(("127.0.0.1", port))  # bound, not listening yet: connections are refused
    timer = threading.Timer(0.5, server.listen)
    timer.start()
    try:
        started = time.monotonic()
        with connect(f"127.0.0.1:{port}", connect_timeout_s=10, request_timeout_s=1) as connection:
            assert connection.sock.getpeername()[1] == port
        assert 0.4 < time.monotonic() - started < 5
    finally:
        timer.join()
        server.close()


def test_connect_tries_each_bootstrap_address_then_gives_up_with_the_last_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        listening = f"127.0.0.1:{server.getsockname()[1]}"
        refused = f"127.0.0.1:{free_port()}"
        with connect(f"{refused},{listening}", connect_timeout_s=5, request_timeout_s=1) as c:
            assert c.sock.getpeername()[1] == server.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(ConnectionRefusedError):
        connect(refused, connect_timeout_s=0.5, request_timeout_s=1)
    assert 0.4 < time.monotonic() - started < 3
    with pytest.raises(ValueError):
        connect("no-port", connect_timeout_s=5, request_timeout_s=1)
