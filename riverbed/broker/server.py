"""The broker's asyncio server: opens the data directory, listens, serves, shuts down cleanly.

The data directory holds, besides the partition directories of ``riverbed.log``:

- ``meta.properties`` — ``version``, ``cluster.id`` and ``node.id``, written once when the
  directory is first used (Kafka's file of the same name), so a restarted broker keeps its
  cluster id and a data directory is not used by a broker with another node id;
- ``.lock`` — held with ``flock`` while a broker runs, so two brokers never share a directory.

Shutdown (SIGTERM/SIGINT in the command, :meth:`BrokerServer.stop` in process) stops
accepting, closes connections, waits for an fsync round in progress, then closes every log,
which flushes it and marks it cleanly shut down so the next start skips recovery.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import logging
import os
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import IO

from riverbed.broker.config import BrokerConfig, ConfigError, parse_properties
from riverbed.broker.connection import Connection
from riverbed.broker.flusher import GroupFlusher
from riverbed.broker.groups import GroupCoordinator, GroupSettings, LoopTimers, OffsetStore
from riverbed.broker.groups.consumer import ConsumerGroups, TopicInfo
from riverbed.broker.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, InternalTopic
from riverbed.broker.log_maintenance import LogMaintenance
from riverbed.broker.metrics import BrokerMetrics, MetricsServer
from riverbed.broker.purgatory import FetchPurgatory
from riverbed.broker.state import BrokerState
from riverbed.broker.txn import TransactionCoordinator, TxnSettings, TxnStateLog
from riverbed.log import CleanerSettings, LogError, LogManager

__all__ = ["BrokerServer", "DataDirError", "MetricsListenError"]

log = logging.getLogger(__name__)

META_FILE = "meta.properties"
LOCK_FILE = ".lock"


class DataDirError(ConfigError):
    """The data directory cannot be used (locked by another broker, another node's, ...)."""


class MetricsListenError(ConfigError):
    """``metrics.listen`` names an address the broker cannot listen on."""


def system_clock() -> int:
    return time.time_ns() // 1_000_000


ACCEPT_TURNS = 8
"""Event-loop turns from a connection's accept to its socket's close when the broker is
stopping: asyncio's accept task makes the transport, then the stream's callback runs
(``_on_connection``, which closes it), then the transport closes its socket."""


async def _loop_turns(turns: int = ACCEPT_TURNS) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)


async def _stop_accepting(server: asyncio.Server) -> None:
    """Stop accepting, and let the connections accepted already reach ``_on_connection``
    before ``server.close()``: Python 3.11's asyncio drops a connection accepted before
    ``close()`` whose transport is made after it without closing its socket (the transport
    asserts the server is open), and a connection whose callback never runs keeps its
    socket open after the loop ends. Either leaks a socket in an in-process broker."""
    loop = asyncio.get_running_loop()
    for sock in server.sockets:
        loop.remove_reader(sock.fileno())
    await _loop_turns()


def _new_cluster_id() -> str:
    # Kafka's cluster ids are a random UUID in URL-safe base64 without padding (22 chars).
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _lock(data_dir: Path) -> IO[bytes]:
    handle = (data_dir / LOCK_FILE).open("ab")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise DataDirError(f"{data_dir} is in use by another broker") from None
    return handle


def _load_meta(data_dir: Path, *, node_id: int) -> str:
    """The cluster id of this data directory, creating ``meta.properties`` if missing."""
    path = data_dir / META_FILE
    if path.exists():
        meta = parse_properties(path.read_text().splitlines(), source=str(path))
        if meta.get("node.id") != str(node_id):
            raise DataDirError(
                f"{path} belongs to node {meta.get('node.id')}, but this broker is node {node_id}"
            )
        if not meta.get("cluster.id"):
            raise DataDirError(f"{path} has no cluster.id")
        return meta["cluster.id"]
    cluster_id = _new_cluster_id()
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as f:
        f.write(
            f"#riverbed broker metadata\nversion=1\ncluster.id={cluster_id}\nnode.id={node_id}\n"
        )
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return cluster_id


def _subscribable_topics(logs: LogManager) -> dict[str, TopicInfo]:
    """The topics a consumer-protocol member may subscribe to, by name. Internal topics
    (``__consumer_offsets``, ...) are never subscribed to, not even by regex."""
    return {
        name: TopicInfo(name=name, topic_id=t.topic_id, partitions=t.partitions)
        for name, t in logs.topics().items()
        if not name.startswith("__")
    }


class BrokerServer:
    """A broker on the running event loop: ``await start()``, ``await stop()``."""

    def __init__(self, config: BrokerConfig, *, clock: Callable[[], int] = system_clock) -> None:
        self.config = config
        self._clock = clock
        self._server: asyncio.Server | None = None
        self._connections: set[Connection] = set()
        self._state: BrokerState | None = None
        self._lock: IO[bytes] | None = None
        self._checkpointer: asyncio.Task[None] | None = None
        self._loader: asyncio.Task[None] | None = None
        self.maintenance: LogMaintenance | None = None
        self.metrics_server: MetricsServer | None = None
        self.port = 0

    async def start(self) -> None:
        """Open the data directory (recovering logs) and start listening."""
        data_dir = self.config.data_dir
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise DataDirError(f"cannot create data directory {data_dir}: {e}") from None
        self._lock = _lock(data_dir)
        try:
            cluster_id = _load_meta(data_dir, node_id=self.config.node_id)
            try:
                logs = await asyncio.to_thread(
                    LogManager.open, data_dir, defaults=self.config.log_defaults, clock=self._clock
                )
            except LogError as e:
                raise DataDirError(f"cannot open {data_dir}: {e}") from None
            try:
                self._server = await asyncio.start_server(
                    self._on_connection,
                    self.config.listen.host,
                    self.config.listen.port,
                    backlog=1024,
                )
            except OSError:
                logs.close()
                raise
        except BaseException:
            self._lock.close()
            self._lock = None
            raise
        self.port = self._server.sockets[0].getsockname()[1]
        metrics = BrokerMetrics()
        flusher = GroupFlusher(observe=metrics.flush_seconds.observe)
        purgatory = FetchPurgatory()
        topics = self._internal_topics(logs, flusher)
        groups = self._group_coordinator(logs, OffsetStore(topics[OFFSETS_TOPIC]))
        self._state = BrokerState(
            config=self.config,
            logs=logs,
            flusher=flusher,
            purgatory=purgatory,
            cluster_id=cluster_id,
            advertised=self.config.advertised_listener(bound_port=self.port),
            clock=self._clock,
            groups=groups,
            txns=self._transaction_coordinator(
                logs, flusher, TxnStateLog(topics[TRANSACTION_STATE_TOPIC]), groups, purgatory
            ),
            metrics=metrics,
        )
        metrics.watch(self._state)
        self._checkpointer = asyncio.create_task(self._checkpoint_periodically(logs))
        self.maintenance = LogMaintenance(
            logs,
            clock=self._clock,
            retention_check_interval_ms=self.config.log_retention_check_interval_ms,
            cleaner_enable=self.config.log_cleaner_enable,
            cleaner_backoff_ms=self.config.log_cleaner_backoff_ms,
            cleaner=CleanerSettings(
                dedupe_buffer_size=self.config.log_cleaner_dedupe_buffer_size,
                io_max_bytes_per_second=self.config.log_cleaner_io_max_bytes_per_second,
            ),
            on_cleaned=metrics.cleaned,
        )
        self.maintenance.start()
        self._loader = asyncio.create_task(self._load_coordinators(self._state))
        try:
            await self._serve_metrics(metrics)
        except BaseException:
            await self.stop()
            raise
        log.info(
            "listening on %s:%d (cluster %s, node %d, data %s)",
            self.config.listen.host,
            self.port,
            cluster_id,
            self.config.node_id,
            data_dir,
        )

    async def _serve_metrics(self, metrics: BrokerMetrics) -> None:
        """Serve ``GET /metrics`` on ``metrics.listen``. Where that was set, an address that
        cannot be used stops the broker from starting; on the default one (127.0.0.1:9644,
        which another broker on this machine may hold) the broker starts without them."""
        listener = self.config.metrics_listen
        if listener is None:
            return
        server = MetricsServer(metrics.exposition)
        try:
            await server.start(listener)
        except OSError as e:
            reason = e.strerror or str(e)
            if self.config.metrics_listen_given:
                raise MetricsListenError(
                    f"cannot serve metrics on {listener} (metrics.listen): {reason}"
                ) from None
            log.warning(
                "not serving metrics: cannot listen on %s (%s); set metrics.listen to another"
                " HOST:PORT, or to nothing to turn them off",
                listener,
                reason,
            )
            return
        self.metrics_server = server
        log.info("metrics on %s", server.url)

    def _internal_topics(self, logs: LogManager, flusher: GroupFlusher) -> dict[str, InternalTopic]:
        """The coordinators' internal topics by name, sized as configured when created."""
        config = self.config
        sizes = {
            OFFSETS_TOPIC: (
                config.offsets_topic_num_partitions,
                config.offsets_topic_segment_bytes,
            ),
            TRANSACTION_STATE_TOPIC: (
                config.transaction_state_log_num_partitions,
                config.transaction_state_log_segment_bytes,
            ),
        }
        # A transaction's Prepare record is fsynced at once, by itself: its client waits for
        # it (riverbed.broker.txn.engine). Offsets and group records share the rounds.
        flushes = {OFFSETS_TOPIC: flusher.flushed, TRANSACTION_STATE_TOPIC: flusher.now}
        return {
            name: InternalTopic(
                logs, name, flush=flushes[name], clock=self._clock, partitions=p, segment_bytes=b
            )
            for name, (p, b) in sizes.items()
        }

    def _group_coordinator(self, logs: LogManager, store: OffsetStore) -> GroupCoordinator:
        config = self.config
        settings = GroupSettings(
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            max_size=config.group_max_size,
            offsets_retention_ms=config.offsets_retention_minutes * 60_000,
            offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
        )
        consumer = ConsumerGroups(
            topics=partial(_subscribable_topics, logs),
            session_timeout_ms=config.group_consumer_session_timeout_ms,
            heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            max_size=config.group_consumer_max_size,
        )
        return GroupCoordinator(
            settings=settings, store=store, timers=LoopTimers(self._clock), consumer=consumer
        )

    def _transaction_coordinator(
        self,
        logs: LogManager,
        flusher: GroupFlusher,
        state_log: TxnStateLog,
        groups: GroupCoordinator,
        purgatory: FetchPurgatory,
    ) -> TransactionCoordinator:
        config = self.config

        def on_marker(topic: str, partition: int, producer_id: int, commit: bool) -> None:
            if topic == OFFSETS_TOPIC:
                groups.store.complete_transaction(partition, producer_id, commit=commit)
            purgatory.notify((topic, partition))  # the last stable offset moved

        settings = TxnSettings(
            max_timeout_ms=config.transaction_max_timeout_ms,
            id_expiration_ms=config.transactional_id_expiration_ms,
        )
        return TransactionCoordinator(
            logs=logs,
            flush=flusher.now,
            timers=LoopTimers(self._clock),
            settings=settings,
            on_marker=on_marker,
            state_log=state_log,
        )

    async def _load_coordinators(self, state: BrokerState) -> None:
        """Read ``__consumer_offsets``, then ``__transaction_state``, in a worker thread
        while the broker already serves; group and transaction requests answer
        COORDINATOR_LOAD_IN_PROGRESS until each is done. Transactions come second: finishing
        an interrupted one writes markers, and those of ``__consumer_offsets`` complete
        offsets the group coordinator must already hold."""
        groups, txns = state.groups, state.txns
        started = time.monotonic()
        try:
            await asyncio.to_thread(groups.store.load)
        except (LogError, OSError) as e:
            log.error("cannot load committed offsets: %s; group requests will be refused", e)
            return
        groups.finish_loading()
        log.info(
            "loaded %d groups' offsets in %.0f ms",
            len(groups.store.group_ids()),
            (time.monotonic() - started) * 1000,
        )
        started = time.monotonic()
        try:
            await asyncio.to_thread(txns.load)
            await txns.recover()
        except (LogError, OSError) as e:
            log.error("cannot load transactions: %s; transactional requests will be refused", e)
            return
        log.info(
            "loaded %d transactional ids in %.0f ms",
            len(txns.states()),
            (time.monotonic() - started) * 1000,
        )

    async def _checkpoint_periodically(self, logs: LogManager) -> None:
        """fsync every log now and then, so recovery after a crash scans only a short tail.

        ``acks=all`` writes are flushed before they are acknowledged anyway; this bounds the
        work after a crash when producers use ``acks=1`` (Kafka's recovery-point checkpoint).
        """
        interval_s = self.config.log_flush_offset_checkpoint_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                await asyncio.to_thread(logs.flush_all)
            except OSError as e:
                log.error("periodic flush failed: %s", e)

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if self._state is None:  # not started, or stopping
            writer.close()
            return
        connection = Connection(self._state, reader, writer)
        self._connections.add(connection)
        metrics = self._state.metrics
        metrics.connection_opened()
        try:
            await connection.serve()
        finally:
            self._connections.discard(connection)
            metrics.connection_closed()

    async def stop(self) -> None:
        """Stop listening, close connections, flush and close the logs."""
        state, self._state = self._state, None
        if self.metrics_server is not None:
            await self.metrics_server.stop()
            self.metrics_server = None
        if self.maintenance is not None:
            await self.maintenance.close()
            self.maintenance = None
        if self._checkpointer is not None:
            self._checkpointer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checkpointer
            self._checkpointer = None
        if self._server is not None:
            await _stop_accepting(self._server)
            self._server.close()
        # Aborting a connection's socket ends its serve() normally; cancelling the task that
        # asyncio.start_server created would make asyncio log a spurious error.
        for connection in list(self._connections):
            connection.abort()
        for _ in range(500):  # at most 5 s; an aborted connection ends in one loop turn
            if not self._connections:
                break
            await asyncio.sleep(0.01)
        if self._loader is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._loader  # a load thread cannot be interrupted
            self._loader = None
        if state is not None:
            await state.txns.close()
            await state.groups.close()
            state.purgatory.notify_all()
            await state.flusher.close()
            await asyncio.to_thread(state.logs.close)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            await _loop_turns()  # the closed connections' sockets close on the next turn
            self._server = None
        if self._lock is not None:
            self._lock.close()
            self._lock = None
        log.info("stopped")

    @property
    def state(self) -> BrokerState:
        if self._state is None:
            raise RuntimeError("the broker is not running")
        return self._state
