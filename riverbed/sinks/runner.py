"""The sink runner: follow changelog topics into a store, until told to stop.

:func:`run_sink` checks that every input topic exists and is a changelog (compacted:
``cleanup.policy`` holds ``compact``, as CDC topics and riverbed changelogs are), then reads
every partition of them with one consumer (``read_committed``; assigned, not subscribed: a
store has one writer) from the positions the store holds, or from the beginning where it
holds none or ``from_beginning`` says so; with ``until_caught_up`` it stops once every
partition has been applied to its end (for read_committed, the last stable offset). Per
batch of what the consumer holds (at most ``max_batch`` records): the changes go to
:meth:`Store.apply` in the log's order, then :meth:`Store.commit` stores them with the new
positions in one step. Every call to the store is made in a thread of its own, and a batch
is applied and committed there while the next one is read and decoded. A batch holding a
record that is not a change is not applied: the runner stops with a
:class:`~riverbed.sinks.changes.NotAChangelog` naming it.

The store's positions are the truth; the runner also commits them to the consumer group
``group_id`` (after the store's commit, at most once a second without waiting, and once
more when it stops), so Kafka's tools show the sink's lag (``riverbed groups describe
riverbed-sink-redis``).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from riverbed.client.reading import ready
from riverbed.sinks.changes import CDC_HEADER, Change, NotAChangelog, SinkError, change_of
from riverbed.sinks.store import Store

__all__ = ["SinkConfig", "SinkCounts", "run_sink"]

_LIBRDKAFKA = logging.getLogger("riverbed.sinks.librdkafka")
T = TypeVar("T")
_COLLECT_EVERY = 50_000
_GROUP_COMMIT_S = 1.0
"""How often the positions go to the consumer group too (and once more at the end): at
2,000 changes/s a commit per batch was some 300 OffsetCommit requests a second."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SinkConfig:
    bootstrap: str
    topics: tuple[str, ...]
    group_id: str
    from_beginning: bool = False
    """Start every partition at its beginning, whatever positions the store holds."""
    until_caught_up: bool = False
    """Stop once every partition has been applied to its end (for scripts and rebuilds)."""
    max_batch: int = 5_000
    timeout_s: float = 30.0
    settings: dict[str, Any] | None = None
    """More librdkafka settings (security, ...)."""


@dataclass(slots=True)
class SinkCounts:
    changes: int = 0
    batches: int = 0

    def describe(self) -> str:
        return f"{self.changes:,} changes applied in {self.batches:,} batches"


def run_sink(
    config: SinkConfig,
    store: Store,
    *,
    stopping: Callable[[], bool],
    say: Callable[[str], None],
    on_commit: Callable[[SinkCounts], None] | None = None,
) -> SinkCounts:
    """Follow ``config.topics`` into ``store`` until ``stopping()`` (module docstring)."""
    partitions = _changelog_partitions(config)
    with _Writer(store) as writer:
        stored = writer.call(store.positions)
        start = {
            tp: (OFFSET_BEGINNING if config.from_beginning else stored.get(tp, OFFSET_BEGINNING))
            for tp in partitions
        }
        resumed = sum(1 for offset in start.values() if offset != OFFSET_BEGINNING)
        say(
            f"following {', '.join(config.topics)} ({len(partitions)} partitions, "
            f"{resumed} from the store's positions, the others from the beginning) "
            f"into {store.name}"
        )
        consumer = Consumer(
            {
                "bootstrap.servers": config.bootstrap,
                "group.id": config.group_id,
                "logger": _LIBRDKAFKA,
                **(config.settings or {}),
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
                # librdkafka stops fetching for fetch.queue.backoff.ms (1 s) whenever its
                # queue is full, which a sink behind its topics fills again and again; and a
                # partition's end is known once a fetch at it comes back empty, after
                # fetch.wait.max.ms (500 ms): 5 ms when that end is where the sink stops.
                "fetch.queue.backoff.ms": 10,
                **({"fetch.wait.max.ms": 5} if config.until_caught_up else {}),
            }
        )
        try:
            consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in start.items()])
            with _fewer_collections():
                return _follow(
                    config, writer, consumer, len(partitions), stopping=stopping,
                    on_commit=on_commit,
                )  # fmt: skip
        finally:
            consumer.close()


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """Python's cycle collector, while the sink follows, at its first generation every
    50,000 allocations instead of 700, and its last one rarely: a batch's records, changes
    and staged rows (some 30,000 objects, none in a cycle) were otherwise scanned again and
    again, a third of the sink's time (BENCHMARKS.md)."""
    threshold = gc.get_threshold()
    gc.set_threshold(_COLLECT_EVERY, 20, 100)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)


class _Writer:
    """The store, driven from a thread of its own: every call to it is made there (a store
    is used from one thread), and :meth:`write` returns once the batch is handed over, so
    that the next batch is read and decoded while this one is applied and committed. What
    a store does outside Python (DuckDB's statements and fsync, Redis running the batch's
    script) then runs beside the sink's Python instead of after it. The store is opened
    on entering, closed on leaving. (Measured: 3-7% more changes/s into Redis and DuckDB;
    more needs less Python, since the sink's Python keeps the GIL busy in both threads.)"""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="riverbed-sink")
        self._pending: Future[None] | None = None
        self._written: tuple[int, dict[tuple[str, int], int]] | None = None

    def __enter__(self) -> _Writer:
        try:
            self.call(self._store.open)
        except BaseException:
            self._thread.shutdown()
            raise
        return self

    def __exit__(self, error: type[BaseException] | None, *_: object) -> None:
        try:
            if error is None:
                self.written()
            elif self._pending is not None:  # its outcome is not the error being raised
                self._pending.exception()
        finally:
            try:
                self.call(self._store.close)
            finally:
                self._thread.shutdown()

    def call(self, method: Callable[[], T]) -> T:
        return self._thread.submit(method).result()

    def write(self, changes: list[Change], positions: dict[tuple[str, int], int]) -> None:
        """Apply and commit a batch in the store's thread, once the batch before it is
        committed; that batch's error, if any, is raised here."""
        self.written()
        self._pending = self._thread.submit(self._write, changes, positions)
        self._written = (len(changes), positions)

    def written(self) -> tuple[int, dict[tuple[str, int], int]] | None:
        """The size and positions of the batch handed over last, once it is committed (None
        if there is none): its error, if it failed."""
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        pending.result()
        return self._written

    def _write(self, changes: list[Change], positions: dict[tuple[str, int], int]) -> None:
        self._store.apply(changes)
        self._store.commit(positions)


def _follow(
    config: SinkConfig,
    writer: _Writer,
    consumer: Consumer,
    partitions: int,
    *,
    stopping: Callable[[], bool],
    on_commit: Callable[[SinkCounts], None] | None,
) -> SinkCounts:
    counts = SinkCounts()
    cdc_topics: set[str] = set()
    at_end: set[tuple[str, int]] = set()
    uncommitted: dict[tuple[str, int], int] = {}  # positions the group has not been told yet
    told_at = time.monotonic()

    def committed() -> None:
        """The batch handed over last is committed: count it, tell the group (at most once
        a second)."""
        nonlocal told_at, uncommitted
        done = writer.written()
        if done is None:
            return
        counts.changes += done[0]
        counts.batches += 1
        uncommitted.update(done[1])
        if time.monotonic() - told_at >= _GROUP_COMMIT_S:
            _commit_to_group(consumer, uncommitted, asynchronous=True)
            uncommitted, told_at = {}, time.monotonic()
        if on_commit is not None:
            on_commit(counts)

    while not stopping():
        if config.until_caught_up and len(at_end) == partitions:
            break
        messages = ready(consumer, config.max_batch, 0.2)
        changes: list[Change] = []
        positions: dict[tuple[str, int], int] = {}
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(_where(message)[:2])
                elif error.fatal():
                    raise SinkError(f"the consumer failed: {error.str()}")
                continue  # transient (a broker restarting): librdkafka retries
            topic, partition, offset = _where(message)
            at_end.discard((topic, partition))
            cdc = topic in cdc_topics or _has_cdc_header(message)
            change = change_of(topic, message.key(), message.value(), cdc=cdc)
            if change.cdc:
                cdc_topics.add(topic)
            changes.append(change)
            positions[(topic, partition)] = offset + 1
        if positions:
            committed()  # the batch before (the store's thread may still be at it)
            writer.write(changes, positions)
        elif not messages:
            committed()  # nothing more to read for now: the last batch is done
    committed()
    if uncommitted:
        _commit_to_group(consumer, uncommitted, asynchronous=False)
    return counts


def _where(message: Message) -> tuple[str, int, int]:
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    assert topic is not None and partition is not None and offset is not None
    return topic, partition, offset


def _has_cdc_header(message: Message) -> bool:
    headers = message.headers()
    return headers is not None and any(header[0] == CDC_HEADER for header in headers)


def _commit_to_group(
    consumer: Consumer, positions: dict[tuple[str, int], int], *, asynchronous: bool
) -> None:
    offsets = [TopicPartition(t, p, offset) for (t, p), offset in positions.items()]
    with contextlib.suppress(KafkaException):  # for Kafka's tools: the store has the positions
        if asynchronous:
            consumer.commit(offsets=offsets, asynchronous=True)
        else:
            consumer.commit(offsets=offsets, asynchronous=False)


def _changelog_partitions(config: SinkConfig) -> list[tuple[str, int]]:
    """Every partition of the input topics; a SinkError for a topic that is missing or is
    not a changelog."""
    settings: dict[str, Any] = {"bootstrap.servers": config.bootstrap, "logger": _LIBRDKAFKA}
    admin = AdminClient({**settings, **(config.settings or {})})
    try:
        metadata = admin.list_topics(timeout=config.timeout_s)
    except KafkaException as e:
        raise SinkError(f"no broker at {config.bootstrap}: {_kafka_text(e)}") from None
    partitions: list[tuple[str, int]] = []
    for topic in config.topics:
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            raise SinkError(f"no topic {topic!r} at {config.bootstrap}")
        partitions.extend((topic, p) for p in sorted(found.partitions))
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in config.topics]
    for resource, future in admin.describe_configs(resources).items():
        try:
            entries = future.result(config.timeout_s)
        except KafkaException as e:
            raise SinkError(
                f"cannot read the configs of {resource.name}: {_kafka_text(e)}"
            ) from None
        policy = entries["cleanup.policy"].value if "cleanup.policy" in entries else "delete"
        if "compact" not in (policy or "").split(","):
            raise NotAChangelog(
                f"{resource.name} is not a changelog (cleanup.policy={policy}): a sink "
                "follows compacted topics, such as CDC topics and riverbed's changelogs"
            )
    return partitions


def _kafka_text(error: KafkaException) -> str:
    first = error.args[0] if error.args else error
    return first.str() if isinstance(first, KafkaError) else str(first)
