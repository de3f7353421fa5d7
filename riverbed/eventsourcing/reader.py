"""Reading an aggregate back from the log: its history, its state now or in the past, and
forgetting a subject. What ``riverbed es state|history|forget`` do, as a Python API.

An aggregate's events live in one partition of the events topic: the one murmur2 of its
key chooses (:mod:`riverbed.client.partitioner`), as for its commands. A reader scans that
partition (read_committed) and keeps the aggregate's events. In its history, personal fields
are opened with the subject's keys from the key topic, read just before, and are ``None``
for a forgotten subject; a state's replay reads no keys, since a state holds no personal
field.

**Time travel** is replay: the state after version N, or as of event time T (the events in
version order while their ``ts`` is at most T: the cart as it was at T, if events are
recorded when they happen). The latest snapshot helps when it lies before the version asked
for: the replay starts from it and reads only the events after its offset. It cannot help
as of a time, since a snapshot does not say when its events happened.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from confluent_kafka import Message, Producer

from riverbed.client.partitioner import murmur2_partition
from riverbed.client.reading import TopicReader, TopicReadError
from riverbed.eventsourcing.aggregate_type import AggregateType, Snapshot
from riverbed.eventsourcing.errors import EventSourcingError, MessageError, ReplayError
from riverbed.eventsourcing.handling import Aggregate, replay
from riverbed.eventsourcing.messages import Event
from riverbed.eventsourcing.shredding import Keyring, opened

__all__ = ["AggregateReader", "ReaderError"]

S = TypeVar("S")
C = TypeVar("C")
E = TypeVar("E")


class ReaderError(EventSourcingError):
    """No broker, no such topic, or a topic that cannot be read to its end."""


class AggregateReader(Generic[S, C, E]):
    """Reads aggregates of ``kind`` from the brokers at ``bootstrap``, its reads sharing one
    consumer: use it as a context manager, or :meth:`close` it."""

    def __init__(
        self,
        kind: AggregateType[S, C, E],
        bootstrap: str,
        *,
        timeout_s: float = 30,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        self.kind = kind
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self.extra = dict(extra or {})
        self._partitions: int | None = None
        self._snapshots = False  # whether the snapshots topic exists
        self._reader: TopicReader | None = None

    def __enter__(self) -> AggregateReader[S, C, E]:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the consumer its reads share (one is made again if it reads on)."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def _topic_reader(self) -> TopicReader:
        if self._reader is None:
            self._reader = TopicReader(self.bootstrap, timeout_s=self.timeout_s,
                                       settings=self.extra)  # fmt: skip
        return self._reader

    def keyring(self) -> Keyring:
        """Every subject's keys, as the key topic holds them now."""
        keyring = Keyring()

        def apply(message: Message) -> None:
            with contextlib.suppress(MessageError):  # not a key record: it opens nothing
                keyring.apply(message.key(), message.value())

        self._read(self.kind.topics.keys, None, apply)
        return keyring

    def partition_of(self, aggregate_id: str) -> int:
        """The partition of the events topic that holds ``aggregate_id``'s events."""
        if self._partitions is None:
            topics = self._topics()
            events = topics.get(self.kind.topics.events)
            if events is None:
                raise ReaderError(self.kind.no_topic(self.kind.topics.events, self.bootstrap))
            self._partitions = events
            self._snapshots = self.kind.topics.snapshots in topics
        return murmur2_partition(self.kind.format.key(aggregate_id), self._partitions)

    def _topics(self) -> dict[str, int]:
        """The partition counts of the topics there are (a consumer's metadata request, which
        creates none)."""
        try:
            return self._topic_reader().partition_counts()
        except TopicReadError as e:
            raise ReaderError(str(e)) from None

    def snapshot_of(self, aggregate_id: str) -> Snapshot[S] | None:
        """The latest snapshot of ``aggregate_id``, if it has one."""
        key = self.kind.format.key(aggregate_id)
        latest: list[Message] = []

        def keep(message: Message) -> None:
            if message.key() == key:
                latest[:] = [message]

        partition = self.partition_of(aggregate_id)
        if not self._snapshots:
            return None
        self._read(self.kind.topics.snapshots, partition, keep)
        if not latest or latest[0].value() is None:
            return None
        try:
            return self.kind.decode_snapshot(latest[0].value())
        except MessageError:
            return None  # derived data: replaying the events gives the state all the same

    def events_of(
        self, aggregate_id: str, *, after: int = -1, keyring: Keyring | None = None
    ) -> list[Event]:
        """``aggregate_id``'s events (after offset ``after`` of its partition), in version
        order, personal fields opened with ``keyring`` (the key topic's, if not given)."""
        key = self.kind.format.key(aggregate_id)
        keys = self.keyring() if keyring is None else keyring
        events: list[Event] = []

        def keep(message: Message) -> None:
            if message.key() != key:
                return
            try:
                event = self.kind.format.decode_event(message.value())
            except MessageError as e:
                raise ReaderError(
                    f"{self.kind.topics.events}/{message.partition()}@{message.offset()}: {e}"
                ) from None
            events.append(opened(event, self.kind.personal, keys))

        partition = self.partition_of(aggregate_id)
        self._read(self.kind.topics.events, partition, keep, start=after + 1)
        return events

    def state_of(
        self,
        aggregate_id: str,
        *,
        at_version: int | None = None,
        at_time: int | None = None,
        snapshots: bool = True,
    ) -> Aggregate[S]:
        """``aggregate_id``'s state now, after version ``at_version``, or as of event time
        ``at_time`` (module docstring); ``snapshots=False`` replays from the first event."""
        start, after = self.kind.initial(aggregate_id), -1
        snapshot = self.snapshot_of(aggregate_id) if snapshots and at_time is None else None
        if snapshot is not None and (
            at_version is None or snapshot.aggregate.version <= at_version
        ):
            start, after = snapshot.aggregate, snapshot.offset
        # A state holds no personal field (AggregateType's rule), so the replay needs none of
        # the key topic's keys: sealed fields fold as None, as for a forgotten subject.
        events = self.events_of(aggregate_id, after=after, keyring=Keyring())
        wanted = [
            event
            for event in _while(events, at_time)
            if event.version > start.version and (at_version is None or event.version <= at_version)
        ]
        try:
            state = replay(self.kind.decider, self.kind.types, start, wanted)
        except MessageError as e:
            raise ReplayError(f"{aggregate_id}: {e}") from None
        if at_version is not None and state.version < at_version:
            raise ReplayError(f"{aggregate_id} has {state.version} events, not {at_version}")
        return state

    def forget(self, subject: str) -> int:
        """Delete ``subject``'s keys (a tombstone in the key topic), after which their
        personal fields read as ``None`` everywhere; returns how many keys it had."""
        if self.kind.topics.keys not in self._topics():
            raise ReaderError(self.kind.no_topic(self.kind.topics.keys, self.bootstrap))
        held = len(self.keyring().keys_of(subject))
        producer = Producer(self._settings(**{"enable.idempotence": True}))
        failures: list[str] = []

        def delivered(error: Any, _: Message) -> None:
            if error is not None:
                failures.append(error.str())

        key, value = Keyring.tombstone(subject)
        producer.produce(self.kind.topics.keys, key=key, value=value, on_delivery=delivered)
        if producer.flush(self.timeout_s) or failures:
            raise ReaderError(f"cannot write the tombstone of {subject!r}: {failures}")
        return held

    def _settings(self, **more: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, **self.extra, **more}

    def _read(
        self,
        topic: str,
        partition: int | None,
        each: Callable[[Message], Any],
        *,
        start: int = 0,
    ) -> None:
        try:
            self._topic_reader().read(
                topic, each,
                partitions=None if partition is None else [partition],
                start=None if partition is None or not start else {partition: start},
            )  # fmt: skip
        except TopicReadError as e:
            raise ReaderError(str(e)) from None


def _while(events: list[Event], at_time: int | None) -> list[Event]:
    """The events up to the first one later than ``at_time``."""
    if at_time is None:
        return events
    for n, event in enumerate(events):
        if event.ts > at_time:
            return events[:n]
    return events
