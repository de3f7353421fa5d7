"""The broker's Prometheus metrics (:class:`BrokerMetrics`), served at ``GET /metrics`` on a
listener of their own (:class:`MetricsServer`, the setting ``metrics.listen``).

What is counted as it happens (Prometheus' naming: base units, ``_total`` counters, no label
per client, so the series stay few):

- ``riverbed_requests_total{api}`` and ``riverbed_request_duration_seconds{api}`` (a
  histogram): every request, by its API's Kafka name (``Produce``, ``Fetch``, ...), timed
  from the moment its frame is decoded to the moment its answer is ready (a long-polling
  Fetch counts its wait, as Kafka's ``TotalTimeMs`` does);
- ``riverbed_request_errors_total{api,error}``: the error codes other than NONE in the
  answers (each partition's, as Kafka's ``ErrorsPerSec`` counts them), by Kafka's error
  name; a request whose handler failed counts as ``UNKNOWN_SERVER_ERROR``;
- ``riverbed_topic_bytes_in_total{topic}``, ``riverbed_topic_records_in_total{topic}``: the
  batches appended by Produce (duplicates of an idempotent producer not counted);
  ``riverbed_topic_bytes_out_total{topic}``: the bytes of records Fetch sent. Records out
  are not counted: a fetch sends stored batches from the file without reading them (Kafka's
  broker counts no records out either);
- ``riverbed_log_flush_duration_seconds``: each fsync of a partition log;
- ``riverbed_log_cleaner_runs_total``, ``riverbed_log_cleaner_reclaimed_bytes_total``:
  compactions installed and the bytes they freed;
- ``riverbed_connections`` (open now) and ``riverbed_connections_opened_total``.

What is read from the broker's state when scraped (:func:`state_text`), so that a
scrape tells the state at that moment and nothing is kept for it: per partition
``riverbed_log_start_offset``, ``riverbed_log_end_offset`` and ``riverbed_log_size_bytes``
(internal topics included); per group and partition with a committed offset
``riverbed_consumer_group_committed_offset`` and ``riverbed_consumer_group_lag`` (the log end
offset less the committed offset, 0 when the commit is ahead); and
``riverbed_transactions_open`` (transactions begun and not yet completed).

The HTTP server runs on the broker's event loop, so a scrape reads the state between two
requests, never in the middle of one; it answers ``GET`` and ``HEAD`` of ``/metrics``, 404 for
other paths, 405 for other methods, and closes each connection after its answer. The format
follows the ``Accept`` header as prometheus_client's own server does: OpenMetrics for a
Prometheus server that asks for it, Prometheus' text format 0.0.4 for a plain ``curl``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

from riverbed.broker.config import Listener
from riverbed.protocol import ApiKey, ErrorCode

__all__ = ["BrokerMetrics", "MetricsServer", "api_name", "error_counts", "state_text"]

log = logging.getLogger(__name__)

REQUEST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Request durations (seconds): from a cached Metadata answer to a Fetch's long poll
(``fetch.max.wait.ms``, 500 ms by default) and a slow transaction commit."""
FLUSH_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0)
"""fsync durations (seconds): tens of microseconds on a page cache with nothing to write, to
a second on a disk under load."""
HEAD_LIMIT_BYTES = 16 * 1024
"""The most of a request head read before the server gives up on it."""
HEAD_TIMEOUT_S = 10.0
EOF = b"# EOF\n"
"""The last line of an OpenMetrics exposition."""


def api_name(key: ApiKey) -> str:
    """Kafka's name of an API (``CONSUMER_GROUP_HEARTBEAT`` → ``ConsumerGroupHeartbeat``), the
    ``request`` tag of Kafka's own request metrics."""
    return "".join(part.capitalize() for part in key.name.split("_"))


def error_counts(body: Any, counts: dict[int, int] | None = None) -> dict[int, int]:
    """The error codes other than NONE anywhere in an answer's body (its ``error_code``
    fields, at any depth), with how often each appears."""
    if counts is None:
        counts = {}
    if isinstance(body, dict):
        code = body.get("error_code")
        if code:
            counts[int(code)] = counts.get(int(code), 0) + 1
        for value in body.values():
            if isinstance(value, list | dict):
                error_counts(value, counts)
    elif isinstance(body, list):
        for item in body:
            if isinstance(item, list | dict):
                error_counts(item, counts)
    return counts


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"ERROR_{code}"


class BrokerMetrics:
    """One broker's metrics, in a registry of its own (several brokers may share a
    process: tests, notebooks)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        self._requests = Counter(
            "riverbed_requests", "Requests handled, by API.", ["api"], registry=registry
        )
        self._errors = Counter(
            "riverbed_request_errors",
            "Error codes other than NONE in answers (each partition's counts), by API and error.",
            ["api", "error"],
            registry=registry,
        )
        self._seconds = Histogram(
            "riverbed_request_duration_seconds",
            "Time from a request's arrival to its answer, by API (a Fetch's long poll included).",
            ["api"],
            buckets=REQUEST_BUCKETS,
            registry=registry,
        )
        self._bytes_in = Counter(
            "riverbed_topic_bytes_in",
            "Bytes of record batches appended by Produce, by topic.",
            ["topic"],
            registry=registry,
        )
        self._records_in = Counter(
            "riverbed_topic_records_in",
            "Records appended by Produce, by topic.",
            ["topic"],
            registry=registry,
        )
        self._bytes_out = Counter(
            "riverbed_topic_bytes_out",
            "Bytes of record batches sent by Fetch, by topic.",
            ["topic"],
            registry=registry,
        )
        self.flush_seconds = Histogram(
            "riverbed_log_flush_duration_seconds",
            "Duration of each fsync of a partition log.",
            buckets=FLUSH_BUCKETS,
            registry=registry,
        )
        self._cleaner_runs = Counter(
            "riverbed_log_cleaner_runs",
            "Compactions of a partition log installed by the log cleaner.",
            registry=registry,
        )
        self._cleaner_reclaimed = Counter(
            "riverbed_log_cleaner_reclaimed_bytes",
            "Bytes freed by the log cleaner's compactions (the segments before less after).",
            registry=registry,
        )
        self._connections = Gauge(
            "riverbed_connections", "Client connections open now.", registry=registry
        )
        self._connections_opened = Counter(
            "riverbed_connections_opened",
            "Client connections accepted since the broker started.",
            registry=registry,
        )
        self._state: Any = None
        self._by_api: dict[ApiKey, tuple[str, Any, Any]] = {}
        self._by_topic: dict[str, tuple[Any, Any, Any]] = {}

    def watch(self, state: Any) -> None:
        """Read the partitions, groups and transactions of ``state`` (the broker's
        :class:`~riverbed.broker.state.BrokerState`) at each scrape."""
        self._state = state

    # --- counted as it happens (the event loop; flush_seconds also from flush threads) -----

    def request_done(self, key: ApiKey, seconds: float, body: Any) -> None:
        """A request of API ``key`` answered with ``body`` (None: no answer, acks=0) after
        ``seconds``."""
        name, requests, histogram = self._api(key)
        requests.inc()
        histogram.observe(seconds)
        if body is not None:
            for code, count in error_counts(body).items():
                self._errors.labels(name, _error_name(code)).inc(count)

    def request_failed(self, key: ApiKey, seconds: float) -> None:
        """A request whose handler raised (the connection is closed)."""
        name, requests, histogram = self._api(key)
        requests.inc()
        histogram.observe(seconds)
        self._errors.labels(name, _error_name(ErrorCode.unknown_server_error)).inc()

    def _api(self, key: ApiKey) -> tuple[str, Any, Any]:
        known = self._by_api.get(key)
        if known is None:
            name = api_name(key)
            known = self._by_api[key] = (
                name,
                self._requests.labels(name),
                self._seconds.labels(name),
            )
        return known

    def _topic(self, topic: str) -> tuple[Any, Any, Any]:
        known = self._by_topic.get(topic)
        if known is None:
            known = self._by_topic[topic] = (
                self._bytes_in.labels(topic),
                self._records_in.labels(topic),
                self._bytes_out.labels(topic),
            )
        return known

    def appended(self, topic: str, size: int, records: int) -> None:
        bytes_in, records_in, _ = self._topic(topic)
        bytes_in.inc(size)
        records_in.inc(records)

    def sent(self, topic: str, size: int) -> None:
        self._topic(topic)[2].inc(size)

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's series go (a topic created again under the name starts at 0)."""
        if self._by_topic.pop(topic, None) is not None:
            for counter in (self._bytes_in, self._records_in, self._bytes_out):
                with contextlib.suppress(KeyError):
                    counter.remove(topic)

    def cleaned(self, reclaimed_bytes: int) -> None:
        self._cleaner_runs.inc()
        self._cleaner_reclaimed.inc(max(reclaimed_bytes, 0))

    def connection_opened(self) -> None:
        self._connections.inc()
        self._connections_opened.inc()

    def connection_closed(self) -> None:
        self._connections.dec()

    def exposition(self, accept: str = "") -> tuple[bytes, str]:
        """The metrics now, and their content type: in the format the ``Accept`` header
        asks for (OpenMetrics, Prometheus' text format 1.0.0), else Prometheus' text format
        0.0.4, which every scraper reads."""
        encode, content_type = choose_encoder(accept)
        counted = encode(self.registry)
        if self._state is None:
            return counted, content_type
        read = state_text(self._state).encode()
        if counted.endswith(EOF):  # OpenMetrics: the gauges go before its end marker
            return counted[: -len(EOF)] + read + EOF, content_type
        return counted + read, content_type


def _escaped(value: str) -> str:
    """A label value in the text formats (a group id may hold any character)."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


def _family(name: str, doc: str, lines: list[str]) -> str:
    return f"# HELP {name} {doc}\n# TYPE {name} gauge\n" + "".join(lines)


def state_text(state: Any) -> str:
    """The gauges read from the broker's state (module docstring), in the lines both text
    formats share for a gauge. Written here rather than through prometheus_client's
    families: a scrape runs on the broker's event loop, and with a thousand topics the
    library's formatting took a tenth of a second (about 11 µs a sample) where this takes a
    few milliseconds."""
    starts, ends_, sizes = [], [], []
    ends: dict[tuple[str, int], int] = {}
    for (topic, partition), partition_log in state.logs.partition_logs():
        labels = f'{{topic="{_escaped(topic)}",partition="{partition}"}} '
        end = partition_log.high_watermark
        ends[(topic, partition)] = end
        starts.append(f"riverbed_log_start_offset{labels}{partition_log.log_start_offset}\n")
        ends_.append(f"riverbed_log_end_offset{labels}{end}\n")
        size = sum(segment.size for segment in partition_log.segments)
        sizes.append(f"riverbed_log_size_bytes{labels}{size}\n")
    committed, lag = [], []
    store = state.groups.store
    for group in sorted(store.group_ids()):
        quoted = _escaped(group)
        for (topic, partition), value in sorted(store.fetch(group).items()):
            labels = f'{{group="{quoted}",topic="{_escaped(topic)}",partition="{partition}"}} '
            committed.append(f"riverbed_consumer_group_committed_offset{labels}{value.offset}\n")
            end = ends.get((topic, partition))
            if end is not None:
                lag.append(f"riverbed_consumer_group_lag{labels}{max(end - value.offset, 0)}\n")
    open_count = sum(1 for meta in state.txns.states().values() if _is_open(meta.state.value))
    return "".join(
        [
            _family("riverbed_log_start_offset", "The first offset of a partition's log.", starts),
            _family(
                "riverbed_log_end_offset",
                "The offset the next record of a partition will get (its high watermark).",
                ends_,
            ),
            _family("riverbed_log_size_bytes", "Bytes of a partition's log segments.", sizes),
            _family(
                "riverbed_consumer_group_committed_offset",
                "A consumer group's committed offset of a partition.",
                committed,
            ),
            _family(
                "riverbed_consumer_group_lag",
                "Records of a partition after a consumer group's committed offset (log end"
                " offset less committed offset).",
                lag,
            ),
            _family(
                "riverbed_transactions_open",
                "Transactions begun (Ongoing) or being completed (PrepareCommit, PrepareAbort).",
                [f"riverbed_transactions_open {open_count}\n"],
            ),
        ]
    )


def _is_open(state_name: str) -> bool:
    return state_name in ("Ongoing", "PrepareCommit", "PrepareAbort")


class MetricsServer:
    """``GET /metrics`` over HTTP/1.1 on the running event loop (module docstring)."""

    def __init__(self, exposition: Callable[[str], tuple[bytes, str]]) -> None:
        self._exposition = exposition
        self._server: asyncio.Server | None = None
        self.address: Listener | None = None

    async def start(self, listener: Listener) -> None:
        """Listen on ``listener`` (port 0: a free port); ``OSError`` if it cannot."""
        self._server = await asyncio.start_server(
            self._serve, listener.host, listener.port, limit=HEAD_LIMIT_BYTES
        )
        host, port = self._server.sockets[0].getsockname()[:2]
        self.address = Listener(host=host, port=port)

    @property
    def url(self) -> str | None:
        return None if self.address is None else f"http://{self.address}/metrics"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(HEAD_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
            status, headers, body = self._answer(head)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            status, headers, body = "400 Bad Request", {}, b"bad request\n"
        except (ConnectionError, OSError):
            writer.close()
            return
        try:
            head_lines = [f"HTTP/1.1 {status}", "Connection: close"]
            headers.setdefault("Content-Type", "text/plain; charset=utf-8")
            length = headers.pop("Content-Length", str(len(body)))
            head_lines += [f"{name}: {value}" for name, value in headers.items()]
            head_lines.append(f"Content-Length: {length}")
            writer.write(("\r\n".join(head_lines) + "\r\n\r\n").encode("latin-1") + body)
            await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    def _answer(self, head: bytes) -> tuple[str, dict[str, str], bytes]:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return "400 Bad Request", {}, b"bad request\n"
        method, target = parts[0], parts[1]
        if target.split("?", 1)[0] != "/metrics":
            return "404 Not Found", {}, b"not found: the metrics are at /metrics\n"
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", {"Allow": "GET, HEAD"}, b"method not allowed\n"
        accept = ""
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "accept":
                accept = value.strip()
        started = time.perf_counter()
        text, content_type = self._exposition(accept)
        log.debug("metrics scraped in %.1f ms", (time.perf_counter() - started) * 1000)
        headers = {"Content-Type": content_type}
        if method == "HEAD":
            return "200 OK", {**headers, "Content-Length": str(len(text))}, b""
        return "200 OK", headers, text
