"""The command processor: a consumer group over the commands topic, one transaction a batch.

Each instance owns some partitions of the commands topic (the group assigns them) and is
their only writer: the events and results of partition P's commands go to partition P of
the events and results topics. On assignment it rebuilds P's carts and decided command ids
by reading those two partitions (and the whole key topic) to their end, read_committed;
then, per batch of commands:

    begin transaction
      key records of new keys, events, results          (to partition P, P's own commands)
      the consumed offsets (send_offsets_to_transaction, with the group's generation)
    commit

A transaction commits whole or not at all, so a processor killed at any instant leaves
either a command's events, result and offset, or none of them: restarted, it decides that
command again from the same state. Zombies are fenced twice: by the group's generation (a
processor that lost P cannot commit P's offsets, KIP-447) and by its transactional id
(``GROUP-INSTANCE``: a restarted instance aborts its predecessor's open transaction at
once; another instance taking over waits at most ``transaction_timeout_ms`` for it).

Instances are static group members (``group.instance.id``, KIP-345): a restarted instance
takes its partitions back without waiting for its dead predecessor's session to time out;
the price is that one stopped for good keeps its partitions until then (librdkafka's
``session.timeout.ms``, 45 s), as a static member sends no LeaveGroup.

A transaction that fails (the broker gone, fenced by a rebalance) is aborted, and the
processor rebuilds its partitions from the topics and goes on from the committed offsets.

**Snapshots.** Every ``snapshot_every`` events of a cart, the processor writes the cart's
state with the offset of its last event to the compacted snapshots topic (partition P, in
the next transaction: an event's offset is known once it is written). A partition is
restored from its carts' latest snapshots plus the events after them: events a snapshot
includes are skipped unread (by key and offset). The partition is still scanned from its
start, since a cart with fewer events than ``snapshot_every`` has no snapshot.

**Keys.** The processor follows the key topic while it runs: a key record that lacks a
key this processor holds for its subject (another processor made a first key for the same
user at the same time) is answered with the union, in the next transaction
(:mod:`~riverbed.eventsourcing.shredding`).

A command must sit in the partition Kafka's Java clients would choose for its aggregate's
key (murmur2 of the compact JSON key, :mod:`riverbed.client.partitioner`): its aggregate's
events live there. One that does not is rejected as ``wrong_partition``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from riverbed.client.reading import TopicReader, TopicReadError, ready
from riverbed.eventsourcing.aggregate_type import AggregateType, Snapshot
from riverbed.eventsourcing.errors import EventSourcingError, MessageError
from riverbed.eventsourcing.partition import CommandPartition
from riverbed.eventsourcing.shredding import Keyring, subject_of_key
from riverbed.eventsourcing.topics import ensure_topics

__all__ = ["CommandProcessor", "ProcessorConfig", "ProcessorError"]

_LOG = logging.getLogger("riverbed.eventsourcing.librdkafka")
"""librdkafka's log of the processor's clients (the errors it acts on come as exceptions)."""

S = TypeVar("S")
C = TypeVar("C")
E = TypeVar("E")


class ProcessorError(EventSourcingError):
    """The processor cannot go on (no broker, fenced for good, topics that do not match)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessorConfig:
    bootstrap: str
    group_id: str
    instance_id: str = "1"
    """Part of the transactional id: give each instance its own, and the same on restart."""
    partitions: int = 3
    """Of the commands, events, results and snapshots topics, when this creates them."""
    max_batch: int = 500
    """Commands per transaction at most."""
    snapshot_every: int = 100
    """A cart's snapshot every this many of its events (0: none)."""
    transaction_timeout_ms: int = 10_000
    """How long an instance's open transaction may block the others after it dies (Kafka's
    default is 60 s; a shorter one lets another instance take over sooner)."""
    timeout_s: float = 30
    extra: Mapping[str, Any] = field(default_factory=dict)
    """librdkafka settings for every client (security, ...)."""


@dataclass(slots=True)
class Counts:
    accepted: int = 0
    rejected: int = 0
    duplicates: int = 0
    unreadable: int = 0
    snapshots: int = 0

    def add(self, other: Counts) -> None:
        self.accepted += other.accepted
        self.rejected += other.rejected
        self.duplicates += other.duplicates
        self.unreadable += other.unreadable
        self.snapshots += other.snapshots


@dataclass(slots=True)
class Restore:
    """What rebuilding the owned partitions read, and how long it took."""

    snapshots: int = 0
    """Aggregates restored from a snapshot (the latest of each)."""
    events: int = 0
    """Events read (those a snapshot includes are skipped: not counted)."""
    events_s: float = 0.0
    """Seconds spent on the snapshots and events."""
    results: int = 0
    results_s: float = 0.0

    def describe(self, aggregates: int) -> str:
        rate = f" ({self.events / self.events_s:,.0f}/s)" if self.events_s > 0 else ""
        return (
            f"{aggregates:,} aggregates from {self.snapshots:,} snapshots and {self.events:,} "
            f"events in {self.events_s:.3f} s{rate}, {self.results:,} results in "
            f"{self.results_s:.3f} s"
        )


@dataclass(slots=True)
class _Owned(Generic[S, C, E]):
    """An owned partition: its state, and its carts' snapshots (written and due)."""

    state: CommandPartition[S, C, E]
    snapshotted: dict[str, int] = field(default_factory=dict)
    """Aggregate id -> the version of its latest snapshot."""
    due: list[Snapshot[S]] = field(default_factory=list)
    """Snapshots to write in the next transaction."""


class CommandProcessor(Generic[S, C, E]):
    """See the module docstring."""

    def __init__(
        self,
        config: ProcessorConfig,
        kind: AggregateType[S, C, E],
        *,
        say: Callable[[str], None],
    ) -> None:
        self.config = config
        self.kind = kind
        self.topics = kind.topics
        self.say = say
        self.keyring = Keyring()
        self.owned: dict[int, _Owned[S, C, E]] = {}
        self.partition_count = 0
        self.counts = Counts()
        self._repairs: set[str] = set()  # subjects whose key record must be written again
        self._keys_end = 0  # the offset after the last key record read
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None
        self._keys: Consumer | None = None
        self._reader: TopicReader | None = None

    @property
    def partitions(self) -> dict[int, CommandPartition[S, C, E]]:
        """The owned partitions' states."""
        return {number: owned.state for number, owned in self.owned.items()}

    def _client(self, **settings: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.config.bootstrap, "logger": _LOG, **self.config.extra,
                **settings}  # fmt: skip

    def run(self, *, stopping: Callable[[], bool]) -> None:
        """Process commands until ``stopping()``."""
        self.partition_count = ensure_topics(
            self._client(), self.topics, partitions=self.config.partitions,
            timeout_s=self.config.timeout_s,
        )  # fmt: skip
        producer = Producer(
            self._client(
                **{
                    "transactional.id": f"{self.config.group_id}-{self.config.instance_id}",
                    "transaction.timeout.ms": self.config.transaction_timeout_ms,
                    "linger.ms": 5,
                }
            )
        )
        try:
            producer.init_transactions(self.config.timeout_s)
        except KafkaException as e:
            raise ProcessorError(f"cannot start transactions: {e.args[0].str()}") from None
        consumer = Consumer(
            self._client(
                **{
                    "group.id": self.config.group_id,
                    # Static membership (KIP-345): a restarted instance takes its partitions
                    # back at once, instead of after the dead one's session times out.
                    "group.instance.id": f"{self.config.group_id}-{self.config.instance_id}",
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                    "isolation.level": "read_committed",
                    "fetch.wait.max.ms": 50,
                }
            )
        )
        keys = Consumer(
            self._client(
                **{
                    "group.id": f"{self.config.group_id}-keys",  # assign() only
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "fetch.wait.max.ms": 100,
                }
            )
        )
        self._consumer, self._producer, self._keys = consumer, producer, keys
        self._read_keys()
        consumer.subscribe([self.topics.commands], on_assign=self._assigned,
                           on_revoke=self._revoked, on_lost=self._revoked)  # fmt: skip
        self.say(f"processing {self.topics.commands} as {self.config.group_id}")
        try:
            while not stopping():
                messages = ready(consumer, self.config.max_batch, 0.2)
                batch = [m for m in messages if m.error() is None]
                for message in messages:
                    error = message.error()
                    if error is not None and error.fatal():
                        raise ProcessorError(f"consumer: {error.str()}")
                self._follow_keys()
                if batch or self._repairs or any(o.due for o in self.owned.values()):
                    self._process(batch)
        finally:
            consumer.close()
            keys.close()
            if self._reader is not None:
                self._reader.close()
                self._reader = None
            producer.flush(self.config.timeout_s)
            c = self.counts
            self.say(
                f"stopped: {c.accepted} accepted, {c.rejected} rejected, {c.duplicates} "
                f"re-sent, {c.unreadable} unreadable, {c.snapshots} snapshots"
            )

    def _process(self, batch: list[Message]) -> None:
        assert self._producer is not None and self._consumer is not None
        producer, consumer = self._producer, self._consumer
        counts = Counts()
        offsets_of: dict[str, int] = {}  # event id -> its offset, once delivered

        def delivered(event_id: str) -> Callable[[KafkaError | None, Message], None]:
            def report(error: KafkaError | None, message: Message) -> None:
                offset = message.offset()
                if error is None and offset is not None:
                    offsets_of[event_id] = offset

            return report

        touched: dict[int, set[str]] = {}
        try:
            producer.begin_transaction()
            for subject in sorted(self._repairs):
                key, value = self.keyring.record(subject, created_ts=_now_ms())
                producer.produce(self.topics.keys, key=key, value=value)
            for number, owned in self.owned.items():
                for snapshot in owned.due:
                    key, value = self.kind.encode_snapshot(snapshot)
                    producer.produce(self.topics.snapshots, key=key, value=value,
                                     partition=number)  # fmt: skip
                counts.snapshots += len(owned.due)
            offsets: dict[int, int] = {}
            for message in batch:
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                owned_now = self.owned.get(partition)
                if owned_now is None:  # revoked in this poll: the new owner answers it
                    continue
                offsets[partition] = offset + 1
                try:
                    handled = owned_now.state.handle(message.value())
                except MessageError as e:
                    counts.unreadable += 1
                    self.say(f"skipped {self.topics.commands}/{partition}@{offset}: {e}")
                    continue
                for subject in handled.new_keys:
                    key, value = self.keyring.record(subject, created_ts=_now_ms())
                    producer.produce(self.topics.keys, key=key, value=value)
                for event in handled.events:
                    key, value = self.kind.format.encode_event(event)
                    producer.produce(self.topics.events, key=key, value=value,
                                     partition=partition,
                                     on_delivery=delivered(event.event_id))  # fmt: skip
                    touched.setdefault(partition, set()).add(event.aggregate_id)
                key, value = self.kind.format.encode_result(handled.result)
                producer.produce(self.topics.results, key=key, value=value, partition=partition)
                if handled.duplicate:
                    counts.duplicates += 1
                elif handled.result.accepted:
                    counts.accepted += 1
                else:
                    counts.rejected += 1
            # The batch's records sent and acknowledged before the offsets: left to
            # commit_transaction, a cycle at 1,000 commands/s took 18.5 ms instead of 12.5
            # (measured, one run each; BENCHMARKS.md).
            producer.flush(self.config.timeout_s)
            if offsets:
                positions = [TopicPartition(self.topics.commands, p, o) for p, o in offsets.items()]
                producer.send_offsets_to_transaction(
                    positions, consumer.consumer_group_metadata(), self.config.timeout_s
                )
            producer.commit_transaction(self.config.timeout_s)
        except KafkaException as e:
            error = e.args[0]
            if error.fatal():
                raise ProcessorError(f"fenced or failed for good: {error.str()}") from None
            self.say(f"transaction aborted ({error.str()}); rebuilding from the topics")
            try:
                producer.abort_transaction(self.config.timeout_s)
            except KafkaException as abort_error:
                raise ProcessorError(f"cannot abort: {abort_error.args[0].str()}") from None
            self._read_keys()  # the keys made in that transaction were not written
            self._restore(list(self.owned))
            self._rewind(list(self.owned))
            return
        producer.poll(0)  # serve the delivery reports commit_transaction left
        self._repairs.clear()
        for owned in self.owned.values():
            owned.due.clear()
        self._snapshots_due(touched, offsets_of)
        self.counts.add(counts)

    def _snapshots_due(self, touched: dict[int, set[str]], offsets_of: dict[str, int]) -> None:
        """The snapshots of the carts that reached a multiple of ``snapshot_every`` events
        in the transaction just committed, for the next one."""
        every = self.config.snapshot_every
        if every <= 0:
            return
        for number, aggregate_ids in touched.items():
            owned = self.owned.get(number)
            if owned is None:
                continue
            for aggregate_id in aggregate_ids:
                aggregate = owned.state.aggregates[aggregate_id]
                last = owned.snapshotted.get(aggregate_id, 0)
                offset = offsets_of.get(f"{aggregate_id}:{aggregate.version}")
                if aggregate.version // every > last // every and offset is not None:
                    owned.due.append(Snapshot(aggregate=aggregate, offset=offset))
                    owned.snapshotted[aggregate_id] = aggregate.version

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        restore = self._restore([tp.partition for tp in partitions])
        aggregates = sum(len(o.state.aggregates) for o in self.owned.values())
        self.say(
            f"assigned {self.topics.commands} partitions {sorted(self.owned)}: restored "
            f"{restore.describe(aggregates)}"
        )

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.owned.pop(tp.partition, None)

    def _rewind(self, owned: list[int]) -> None:
        """Seek the consumer back to the committed offsets of ``owned``."""
        assert self._consumer is not None
        wanted = [TopicPartition(self.topics.commands, p) for p in owned]
        for tp in self._consumer.committed(wanted, timeout=self.config.timeout_s):
            offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            self._consumer.seek(TopicPartition(self.topics.commands, tp.partition, offset))

    def _read_keys(self) -> None:
        """Read the whole key topic into the key ring, and follow it from its end."""
        assert self._keys is not None
        self.keyring.keys.clear()
        self._repairs.clear()
        self._keys_end = 0
        self._read(self.topics.keys, {0: self._apply_key})  # one partition
        self._keys.assign([TopicPartition(self.topics.keys, 0, self._keys_end)])

    def _follow_keys(self) -> None:
        assert self._keys is not None
        for message in self._keys.consume(num_messages=1000, timeout=0):
            error = message.error()
            if error is None:
                self._apply_key(message)
            elif error.fatal():
                raise ProcessorError(f"key topic: {error.str()}")

    def _apply_key(self, message: Message) -> None:
        self._keys_end = max(self._keys_end, (message.offset() or 0) + 1)
        try:
            stale = self.keyring.apply(message.key(), message.value())
        except MessageError as e:
            self.say(f"skipped {self.topics.keys}@{message.offset()}: {e}")
            return
        if stale:
            self._repairs.add(subject_of_key(message.key()))

    def _restore(self, owned: list[int]) -> Restore:
        """Rebuild the ``owned`` partitions' states from their carts' snapshots, the events
        after them and their results: each topic read once for all of them. (A read per
        partition and topic costs a metadata request and an empty fetch at each end: four
        empty partitions took 0.14 s to restore that way, and 0.05 s this way.)"""
        self.owned.clear()
        restore = Restore()
        if not owned:
            return restore
        rebuilds = {number: _Rebuild(self, number) for number in owned}
        started = time.perf_counter()
        self._read(self.topics.snapshots, {n: r.snapshot for n, r in rebuilds.items()})
        self._read(self.topics.events, {n: r.event for n, r in rebuilds.items()})
        for rebuild in rebuilds.values():
            rebuild.restoring.close()
            restore.snapshots += len(rebuild.owned.snapshotted)
            restore.events += rebuild.restoring.read
        results_from = time.perf_counter()
        restore.events_s = results_from - started
        self._read(self.topics.results, {n: r.result for n, r in rebuilds.items()})
        restore.results_s = time.perf_counter() - results_from
        for number, rebuild in rebuilds.items():
            restore.results += len(rebuild.owned.state.results)
            self.owned[number] = rebuild.owned
        return restore

    def _read(self, topic: str, each: Mapping[int, Callable[[Message], Any]]) -> None:
        """Every committed record of ``topic``'s partitions (the keys of ``each``) to its
        end, with the consumer every restore shares."""
        if self._reader is None:
            self._reader = TopicReader(
                self.config.bootstrap, timeout_s=self.config.timeout_s,
                settings=self._client(**{"group.id": f"{self.config.group_id}-restore"}),
            )  # fmt: skip
        try:
            self._reader.read_partitions(topic, each)
        except TopicReadError as e:
            raise ProcessorError(f"cannot restore: {e}") from None


class _Rebuild(Generic[S, C, E]):
    """One partition being rebuilt: its snapshots, the events after them, its results. Per
    record, the least work: every event of the partition passes here on each assignment (a
    context manager per record cost a tenth of a replay)."""

    def __init__(self, processor: CommandProcessor[S, C, E], number: int) -> None:
        kind = processor.kind
        state: CommandPartition[S, C, E] = CommandPartition(
            kind=kind, keyring=processor.keyring, number=number, count=processor.partition_count
        )
        self.owned: _Owned[S, C, E] = _Owned(state=state)
        self.restoring = state.restoring()
        self._processor = processor
        self._covered: dict[bytes, int] = {}  # event key -> the offset its snapshot includes
        self._decode_result = kind.format.decode_result

    def snapshot(self, message: Message) -> None:
        processor = self._processor
        kind = processor.kind
        try:
            found = kind.decode_snapshot(message.value())
        except MessageError as e:  # derived data: the events are there
            where = f"{processor.topics.snapshots}/{message.partition()}@{message.offset()}"
            processor.say(f"skipped {where}: {e}")
            return
        self.owned.state.restore_snapshot(found.aggregate)
        self.owned.snapshotted[found.aggregate.aggregate_id] = found.aggregate.version
        self._covered[kind.format.key(found.aggregate.aggregate_id)] = found.offset

    def event(self, message: Message) -> None:
        covered = self._covered
        if covered and covered.get(message.key() or b"", -1) >= (message.offset() or 0):
            return
        try:
            self.restoring.value(message.value())
        except EventSourcingError as e:
            raise _unreadable(message, e) from None

    def result(self, message: Message) -> None:
        try:
            self.owned.state.restore_result(self._decode_result(message.value()))
        except EventSourcingError as e:
            raise _unreadable(message, e) from None


def _unreadable(message: Message, error: EventSourcingError) -> ProcessorError:
    """An event or result that cannot be read stops the processor: the topics it rebuilds
    its partitions from are not what it wrote."""
    where = f"{message.topic()}/{message.partition()}@{message.offset()}"
    return ProcessorError(f"cannot restore from {where}: {error}")


def _now_ms() -> int:
    return int(time.time() * 1000)
