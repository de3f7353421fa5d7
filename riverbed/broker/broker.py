"""The broker in-process, for notebooks and tests: a :class:`BrokerServer` on its own thread.

    with Broker("/tmp/data", listen="127.0.0.1:0") as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers})

The broker runs an event loop on a daemon thread; ``start()`` returns once it listens (or
raises what stopped it from starting), ``stop()`` once it has shut down cleanly.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType

from riverbed.broker.config import DEFAULT_LISTEN, BrokerConfig
from riverbed.broker.server import BrokerServer, system_clock

__all__ = ["Broker"]


class Broker:
    """A riverbed broker running on a background thread of this process."""

    def __init__(
        self,
        data_dir: str | Path,
        *,
        listen: str = DEFAULT_LISTEN,
        config: Mapping[str, str] = {},
        clock: Callable[[], int] = system_clock,
    ) -> None:
        """``config`` takes Kafka broker setting names, e.g. ``{"num.partitions": "4"}``."""
        self.config, self.unknown_settings = BrokerConfig.build(
            data_dir=Path(data_dir), properties=config, listen=listen
        )
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: BrokerServer | None = None
        self._stopped: asyncio.Event | None = None

    @property
    def host(self) -> str:
        return self._running().state.advertised.host

    @property
    def port(self) -> int:
        return self._running().port

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` for a client's ``bootstrap.servers``."""
        return f"{self.host}:{self.port}"

    @property
    def metrics_url(self) -> str | None:
        """``http://HOST:PORT/metrics``, or None when the broker serves no metrics."""
        server = self._running().metrics_server
        return None if server is None else server.url

    def _running(self) -> BrokerServer:
        if self._server is None:
            raise RuntimeError("the broker is not running; call start() first")
        return self._server

    def start(self) -> Broker:
        if self._thread is not None:
            raise RuntimeError("the broker is already running")
        started = threading.Event()
        failure: list[BaseException] = []
        server = BrokerServer(self.config, clock=self._clock)

        def run() -> None:
            async def main() -> None:
                self._loop = asyncio.get_running_loop()
                self._stopped = asyncio.Event()
                try:
                    await server.start()
                except BaseException as e:
                    failure.append(e)
                    started.set()
                    return
                self._server = server
                started.set()
                await self._stopped.wait()
                await server.stop()

            asyncio.run(main())

        self._thread = threading.Thread(target=run, name="riverbed-broker", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            self._thread.join()
            self._thread = None
            raise failure[0]
        return self

    def stop(self) -> None:
        thread, loop, stopped = self._thread, self._loop, self._stopped
        if thread is None or loop is None or stopped is None:
            return
        loop.call_soon_threadsafe(stopped.set)
        thread.join()
        self._thread = self._loop = self._stopped = self._server = None

    def __enter__(self) -> Broker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
