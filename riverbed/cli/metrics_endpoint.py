"""``--metrics HOST:PORT`` of the long-running tools other than the broker (``riverbed cdc
run``, ``riverbed pipeline run``): their Prometheus metrics served over HTTP at
``http://HOST:PORT/metrics`` by prometheus_client's own server, on a daemon thread.

The broker serves its own (``metrics.listen``) on its event loop instead: see
``riverbed.broker.metrics``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from prometheus_client import start_http_server
from prometheus_client.registry import CollectorRegistry

from riverbed.cli.errors import CliError

__all__ = ["MetricsEndpoint", "add_metrics_argument", "host_port", "serving"]


def host_port(text: str) -> tuple[str, int]:
    """An argparse type: ``HOST:PORT`` (port 0: a free one)."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def add_metrics_argument(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--metrics",
        type=host_port,
        metavar="HOST:PORT",
        help=f"serve {what} as Prometheus metrics at http://HOST:PORT/metrics (port 0 picks a"
        " free port, printed on stderr; default: not served)",
    )


class MetricsEndpoint:
    """The HTTP server of one registry; :meth:`close` it when the tool ends."""

    def __init__(self, address: tuple[str, int], registry: CollectorRegistry) -> None:
        host, port = address
        try:
            self._server: Any
            self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        except OSError as e:
            raise CliError(f"cannot serve metrics on {host}:{port}: {e.strerror or e}") from None
        self.url = f"http://{host}:{self._server.server_port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serving(
    address: tuple[str, int] | None,
    registry: CollectorRegistry,
    say: Callable[[str], None],
) -> MetricsEndpoint | None:
    """Serve ``registry`` at ``address`` (None: not at all), saying where."""
    if address is None:
        return None
    endpoint = MetricsEndpoint(address, registry)
    say(f"metrics on {endpoint.url}")
    return endpoint
