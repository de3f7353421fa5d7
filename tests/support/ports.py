"""Free TCP ports on loopback, for brokers that must not be reachable or must come back on
the same port."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now (the OS picked it; it may be taken again later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
