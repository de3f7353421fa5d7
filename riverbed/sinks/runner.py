"""The sink runner: follow changelog topics into a store, until told to stop.

:func:`run_sink` checks that every input topic exists and is a changelog (compacted:
``cleanup.policy`` holds ``compact``, as CDC topics and riverbed changelogs are), then reads
every partition of them (:mod:`~riverbed.sinks.decoding`: in this process, or in
``decoders`` processes that share the partitions) from the positions the store holds, or
from the beginning where it holds none or ``from_beginning`` says so; with
``until_caught_up`` it stops once every partition has been applied to its end (for
read_committed, the last stable offset). Per batch (at most ``max_batch`` records of a
decoder): the changes go to the store in the log's order (:meth:`Store.apply`, or staged
where they are decoded: :class:`~riverbed.sinks.store.StagingStore`), then
:meth:`Store.commit` stores them with the new positions in one step. Every call to the
store is made in a thread of its own, and a batch is applied and committed there while the
next one is read and decoded. A batch holding a record that is not a change is not applied:
the runner stops with a :class:`~riverbed.sinks.changes.NotAChangelog` naming it.

The store's positions are the truth; the runner also commits them to the consumer group
``group_id`` (after the store's commit, at most once a second without waiting, and once
more when it stops), so Kafka's tools show the sink's lag (``riverbed groups describe
riverbed-sink-redis``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from riverbed.sinks.changes import NotAChangelog, SinkError
from riverbed.sinks.decoding import (
    Batch,
    Decoder,
    DecoderProcesses,
    SinkConfig,
    consumer_settings,
    fewer_collections,
    kafka_text,
)
from riverbed.sinks.store import ChangeList, Stager, StagingStore, Store

__all__ = ["SinkConfig", "SinkCounts", "run_sink"]

_LIBRDKAFKA = logging.getLogger("riverbed.sinks.librdkafka")
T = TypeVar("T")
_GROUP_COMMIT_S = 1.0
"""How often the positions go to the consumer group too (and once more at the end): at
2,000 changes/s a commit per batch was some 300 OffsetCommit requests a second."""


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
    apply: Callable[[Any], None]
    stager: Stager
    if isinstance(store, StagingStore):
        stager, apply = store.stager(), store.apply_staged
    else:
        stager, apply = ChangeList(), store.apply
    decoders = min(config.decoders, len(partitions))
    with contextlib.ExitStack() as stack:
        processes = stack.enter_context(DecoderProcesses(decoders)) if decoders > 1 else None
        writer = stack.enter_context(_Writer(store, apply))
        stored = writer.call(store.positions)
        start = {
            tp: (OFFSET_BEGINNING if config.from_beginning else stored.get(tp, OFFSET_BEGINNING))
            for tp in partitions
        }
        resumed = sum(1 for offset in start.values() if offset != OFFSET_BEGINNING)
        decoding = f", {decoders} decoder processes" if processes is not None else ""
        say(
            f"following {', '.join(config.topics)} ({len(partitions)} partitions, "
            f"{resumed} from the store's positions, the others from the beginning) "
            f"into {store.name}{decoding}"
        )
        source: DecoderProcesses | _InProcess
        if processes is not None:
            stack.callback(processes.stop)  # they end while the store closes
            processes.begin(config, start, stager)
            source, group = processes, Consumer(consumer_settings(config))
            stack.callback(group.close)
        else:
            decoder = Decoder(config, start, stager)
            stack.callback(decoder.close)
            source, group = _InProcess(decoder), decoder.consumer
        stack.enter_context(fewer_collections())
        return _follow(config, writer, source, group, stopping=stopping, on_commit=on_commit)


class _InProcess:
    """A decoder in the sink's own thread, read as :class:`DecoderProcesses` are."""

    def __init__(self, decoder: Decoder) -> None:
        self._decoder = decoder

    @property
    def at_end(self) -> bool:
        return self._decoder.at_end

    def read(self) -> list[Batch]:
        batch = self._decoder.read()
        return [] if batch is None else [batch]


class _Writer:
    """The store, driven from a thread of its own: every call to it is made there (a store
    is used from one thread), and :meth:`write` returns once the batch is handed over, so
    that the next batch is read and decoded while this one is applied and committed. What
    a store does outside Python (DuckDB's statements and fsync, Redis running the batch's
    script) then runs beside the sink's Python instead of after it. The store is opened
    on entering, closed on leaving. (Measured: 3-7% more changes/s into Redis and DuckDB;
    more needs less Python, since the sink's Python keeps the GIL busy in both threads.)"""

    def __init__(self, store: Store, apply: Callable[[Any], None]) -> None:
        self._store = store
        self._apply = apply
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="riverbed-sink")
        self._pending: Future[None] | None = None
        self._written: Batch | None = None

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

    def write(self, batch: Batch) -> None:
        """Apply and commit a batch in the store's thread, once the batch before it is
        committed; that batch's error, if any, is raised here."""
        self.written()
        self._pending = self._thread.submit(self._write, batch)
        self._written = batch

    def written(self) -> Batch | None:
        """The batch handed over last, once it is committed (None if there is none): its
        error, if it failed."""
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        pending.result()
        return self._written

    def _write(self, batch: Batch) -> None:
        self._apply(batch.staged)
        self._store.commit(batch.positions)


def _follow(
    config: SinkConfig,
    writer: _Writer,
    source: DecoderProcesses | _InProcess,
    group: Consumer,
    *,
    stopping: Callable[[], bool],
    on_commit: Callable[[SinkCounts], None] | None,
) -> SinkCounts:
    counts = SinkCounts()
    uncommitted: dict[tuple[str, int], int] = {}  # positions the group has not been told yet
    told_at = time.monotonic()

    def committed() -> None:
        """The batch handed over last is committed: count it, tell the group (at most once
        a second)."""
        nonlocal told_at, uncommitted
        done = writer.written()
        if done is None:
            return
        counts.changes += done.records
        counts.batches += 1
        uncommitted.update(done.positions)
        if time.monotonic() - told_at >= _GROUP_COMMIT_S:
            _commit_to_group(group, uncommitted, asynchronous=True)
            uncommitted, told_at = {}, time.monotonic()
        if on_commit is not None:
            on_commit(counts)

    while not stopping():
        if config.until_caught_up and source.at_end:
            break
        batches = source.read()
        for batch in batches:
            committed()  # the batch before (the store's thread may still be at it)
            writer.write(batch)
        if not batches:
            committed()  # nothing more to read for now: the last batch is done
    committed()
    if uncommitted:
        _commit_to_group(group, uncommitted, asynchronous=False)
    return counts


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
        raise SinkError(f"no broker at {config.bootstrap}: {kafka_text(e)}") from None
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
                f"cannot read the configs of {resource.name}: {kafka_text(e)}"
            ) from None
        policy = entries["cleanup.policy"].value if "cleanup.policy" in entries else "delete"
        if "compact" not in (policy or "").split(","):
            raise NotAChangelog(
                f"{resource.name} is not a changelog (cleanup.policy={policy}): a sink "
                "follows compacted topics, such as CDC topics and riverbed's changelogs"
            )
    return partitions
