"""The projection runner on Kafka: the events topic folded into a store, one transaction a
batch (:mod:`~riverbed.eventsourcing.projections` says what a projection guarantees).

    start      the store starts (fencing off a killed predecessor), is cleared for a rebuild,
               and gives back its model and position
    assign     every partition of the events topic, at the store's position (read_committed)
    per batch  up to max_batch events folded; the changed aggregates and the new position
               committed by the store in one transaction

One runner serves one model: it assigns itself all the events partitions (``assign()``, no
consumer-group membership). A model is one store's transaction boundary, so splitting its
events partitions between instances would buy parallelism at the price of a rebalance on
every restart (a killed group member holds its partitions until its session times out,
45 s, unless it is a static member); and a single runner folds 21,000-31,000 events a second
(a rebuild of 100,000 events into either store on 2 vCPUs with the broker beside it; the
fold alone does ~45,000, most of it decoding JSON), above the ~9,000 commands a second the
command processor decides (BENCHMARKS.md). A second runner of the same model is fenced off
by its store (the changelog's transactional id, PostgreSQL's advisory lock).

A commit that fails without harm (:class:`~riverbed.eventsourcing.projections.CommitFailed`:
the broker gone for a while) makes the runner restore from the store and seek back to its
position; any other error stops it, and a restart goes on from the store's position.

Thread model: :meth:`ProjectionRunner.run` runs on the calling thread, and so do the store's
methods; ``stopping`` is called between batches (at least every 0.2 s).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from riverbed.eventsourcing.aggregate_type import AggregateType
from riverbed.eventsourcing.projections import (
    CommitFailed,
    ProjectionError,
    ProjectionFold,
    ProjectionStore,
)

__all__ = ["Progress", "ProjectionConfig", "ProjectionRunner"]

_LOG = logging.getLogger("riverbed.eventsourcing.librdkafka")
"""librdkafka's log of the runner's consumer (the errors it acts on come as messages)."""

S = TypeVar("S")
C = TypeVar("C")
E = TypeVar("E")


@dataclass(frozen=True, slots=True, kw_only=True)
class ProjectionConfig:
    bootstrap: str
    max_batch: int = 5_000
    """Events per store transaction at most. Larger batches fold a backlog faster (one
    transaction, and each changed aggregate written once, per batch); a live projection's
    batches are what arrived in 0.2 s."""
    progress_every_s: float = 10
    """A progress line at most this often, once caught up."""
    timeout_s: float = 30
    extra: Mapping[str, Any] = field(default_factory=dict)
    """librdkafka settings for every client (security, ...)."""


@dataclass(slots=True)
class Progress:
    events: int = 0
    """Events folded (repeats included)."""
    commits: int = 0
    aggregates: int = 0
    """Aggregates in the model."""
    caught_up: bool = False
    """Whether every events partition was read to its end at least once."""


class ProjectionRunner(Generic[S, C, E]):
    """Folds ``kind``'s events topic into ``store`` (see the module docstring)."""

    def __init__(
        self,
        config: ProjectionConfig,
        kind: AggregateType[S, C, E],
        store: ProjectionStore[S],
        *,
        say: Callable[[str], None],
    ) -> None:
        self.config = config
        self.kind = kind
        self.store = store
        self.say = say
        self.progress = Progress()
        self.events = kind.topics.events

    def _client(self, **settings: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.config.bootstrap, "logger": _LOG, **self.config.extra,
                **settings}  # fmt: skip

    def run(
        self,
        *,
        stopping: Callable[[], bool],
        rebuild: bool = False,
        until_caught_up: bool = False,
    ) -> Progress:
        """Fold events until ``stopping()``, or (``until_caught_up``) until every events
        partition has been read to its end; ``rebuild`` clears the model first."""
        consumer = Consumer(
            self._client(
                **{
                    "group.id": f"riverbed-es-projection-{self.kind.name}",  # assign() only
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    "auto.offset.reset": "earliest",
                    "isolation.level": "read_committed",
                    # As riverbed.client.reading: no 1 s pause when the local queue is full.
                    "fetch.wait.max.ms": 50,
                    "fetch.queue.backoff.ms": 10,
                }
            )
        )
        try:
            partitions = self._partition_count(consumer)
            self.store.start(partitions=partitions)
            if rebuild:
                self.store.clear()
                self.say(f"cleared {self.store.name}: rebuilding from offset 0 of {self.events}")
            fold = self._restore(consumer, partitions)
            self._fold(consumer, fold, partitions, stopping, until_caught_up=until_caught_up)
        finally:
            consumer.close()
            self.store.close()
        p = self.progress
        self.say(f"stopped: {p.events} events folded, {p.commits} commits, {p.aggregates} "
                 f"{self.kind.name} in {self.store.name}")  # fmt: skip
        return p

    def _partition_count(self, consumer: Consumer) -> int:
        try:
            topics = consumer.list_topics(timeout=self.config.timeout_s).topics
        except KafkaException as e:
            raise ProjectionError(
                f"no broker at {self.config.bootstrap}: {e.args[0].str()}"
            ) from None
        found = topics.get(self.events)
        if found is None or found.error is not None or not found.partitions:
            raise ProjectionError(self.kind.no_topic(self.events, self.config.bootstrap))
        return len(found.partitions)

    def _restore(self, consumer: Consumer, partitions: int) -> ProjectionFold[S, C, E]:
        """The fold as the store holds it, and the consumer at its position."""
        fold = ProjectionFold.restored(self.kind, self.store.restore())
        consumer.assign(
            [
                TopicPartition(self.events, p, fold.positions.get(p, OFFSET_BEGINNING))
                for p in range(partitions)
            ]
        )
        where = ", ".join(f"{p}@{fold.positions[p]}" for p in sorted(fold.positions)) or "start"
        self.say(
            f"projecting {self.events} into {self.store.name}: {len(fold.aggregates)} "
            f"{self.kind.name} restored, from {where}"
        )
        self.progress.aggregates = len(fold.aggregates)
        return fold

    def _fold(
        self,
        consumer: Consumer,
        fold: ProjectionFold[S, C, E],
        partitions: int,
        stopping: Callable[[], bool],
        *,
        until_caught_up: bool,
    ) -> None:
        progress = self.progress
        started = said = time.monotonic()
        at_end: set[int] = set()  # partitions read to their end, nothing after it yet
        while not stopping():
            for message in consumer.consume(num_messages=self.config.max_batch, timeout=0.2):
                error, partition, offset = message.error(), message.partition(), message.offset()
                if error is None and partition is not None and offset is not None:
                    at_end.discard(partition)
                    fold.apply(partition, offset, message.value())
                elif error is not None and error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(partition or 0)
                elif error is not None and error.fatal():
                    raise ProjectionError(f"{self.events}: {error.str()}")
            batch = fold.take()
            if batch is not None:
                try:
                    self.store.commit(batch)
                except CommitFailed as e:
                    self.say(f"{e}; restoring from {self.store.name}")
                    fold = self._restore(consumer, partitions)
                    at_end.clear()
                    continue
                progress.events += batch.events
                progress.commits += 1
                progress.aggregates = len(fold.aggregates)
            now = time.monotonic()
            if len(at_end) == partitions and not progress.caught_up:
                progress.caught_up = True
                said = now
                rate = progress.events / max(now - started, 1e-3)
                self.say(
                    f"caught up with {self.events}: {progress.events} events folded in "
                    f"{now - started:.1f} s ({rate:.0f} events/s), {progress.aggregates} "
                    f"{self.kind.name}"
                )
            elif progress.caught_up and batch and now - said >= self.config.progress_every_s:
                said = now
                self.say(f"{progress.events} events folded, {progress.aggregates} "
                         f"{self.kind.name}")  # fmt: skip
            if until_caught_up and len(at_end) == partitions:
                return
