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

Not yet: snapshots (a partition is rebuilt from its first event), and checking that a
command sits in the partition murmur2 of its key names (senders must partition as Kafka's
Java clients do; ``riverbed es send`` will).
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
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.eventsourcing.decider import Decider
from riverbed.eventsourcing.errors import EventSourcingError, MessageError
from riverbed.eventsourcing.handling import DomainTypes
from riverbed.eventsourcing.messages import StreamFormat
from riverbed.eventsourcing.partition import CommandPartition
from riverbed.eventsourcing.shredding import Keyring
from riverbed.eventsourcing.topics import Topics

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
    """Of the commands, events and results topics, when this creates them."""
    max_batch: int = 500
    """Commands per transaction at most."""
    transaction_timeout_ms: int = 10_000
    """How long an instance's open transaction may block the others after it dies (Kafka's
    default is 60 s; a shorter one lets another instance take over sooner)."""
    timeout_s: float = 30
    extra: Mapping[str, str] = field(default_factory=dict)
    """librdkafka settings for every client (security, ...)."""


@dataclass(slots=True)
class _Counts:
    accepted: int = 0
    rejected: int = 0
    duplicates: int = 0
    unreadable: int = 0


class CommandProcessor(Generic[S, C, E]):
    """See the module docstring."""

    def __init__(
        self,
        config: ProcessorConfig,
        topics: Topics,
        *,
        decider: Decider[S, C, E],
        types: DomainTypes[C, E],
        format: StreamFormat,
        personal: Mapping[str, tuple[str, ...]],
        say: Callable[[str], None],
    ) -> None:
        self.config = config
        self.topics = topics
        self.decider, self.types, self.format, self.personal = decider, types, format, personal
        self.say = say
        self.keyring = Keyring()
        self.partitions: dict[int, CommandPartition[S, C, E]] = {}
        self.counts = _Counts()
        self._consumer: Consumer | None = None
        self._producer: Producer | None = None

    def _client(self, **settings: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.config.bootstrap, "logger": _LOG, **self.config.extra,
                **settings}  # fmt: skip

    def ensure_topics(self) -> None:
        """Create the topics that are missing; the commands and events topics must have the
        same partition count."""
        admin = AdminClient(self._client())
        try:
            existing = admin.list_topics(timeout=self.config.timeout_s).topics
        except KafkaException as e:
            raise ProcessorError(
                f"no broker at {self.config.bootstrap}: {e.args[0].str()}"
            ) from None
        forever = {"retention.ms": "-1"}
        compacted = {"cleanup.policy": "compact", "min.compaction.lag.ms": "3600000"}
        wanted = {
            self.topics.commands: (self.config.partitions, {}),
            self.topics.events: (self.config.partitions, forever),
            self.topics.results: (self.config.partitions, {}),
            self.topics.snapshots: (self.config.partitions, compacted),
            self.topics.keys: (1, compacted),
        }
        missing = [
            NewTopic(name, num_partitions=n, replication_factor=1, config=settings)
            for name, (n, settings) in wanted.items()
            if name not in existing
        ]
        for name, future in (admin.create_topics(missing) if missing else {}).items():
            try:
                future.result(self.config.timeout_s)
            except KafkaException as e:
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise ProcessorError(f"cannot create {name}: {e.args[0].str()}") from None
        counts = {
            name: len(meta.partitions)
            for name, meta in admin.list_topics(timeout=self.config.timeout_s).topics.items()
            if name in wanted
        }
        aligned = (self.topics.commands, self.topics.events, self.topics.results)
        if len({counts.get(name) for name in aligned}) != 1:
            raise ProcessorError(
                "the commands, events and results topics must have the same partition count: "
                + ", ".join(f"{name} {counts.get(name)}" for name in aligned)
            )

    def run(self, *, stopping: Callable[[], bool]) -> None:
        """Process commands until ``stopping()``."""
        self.ensure_topics()
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
        self._consumer, self._producer = consumer, producer
        consumer.subscribe([self.topics.commands], on_assign=self._assigned,
                           on_revoke=self._revoked, on_lost=self._revoked)  # fmt: skip
        self.say(f"processing {self.topics.commands} as {self.config.group_id}")
        try:
            while not stopping():
                messages = consumer.consume(num_messages=self.config.max_batch, timeout=0.2)
                batch = [m for m in messages if m.error() is None]
                for message in messages:
                    error = message.error()
                    if error is not None and error.fatal():
                        raise ProcessorError(f"consumer: {error.str()}")
                if batch:
                    self._process(batch)
        finally:
            consumer.close()
            producer.flush(self.config.timeout_s)
            c = self.counts
            self.say(
                f"stopped: {c.accepted} accepted, {c.rejected} rejected, {c.duplicates} "
                f"re-sent, {c.unreadable} unreadable"
            )

    def _process(self, batch: list[Message]) -> None:
        assert self._producer is not None and self._consumer is not None
        producer, consumer = self._producer, self._consumer
        counts = _Counts()
        try:
            producer.begin_transaction()
            offsets: dict[int, int] = {}
            for message in batch:
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                state = self.partitions.get(partition)
                if state is None:  # revoked in this poll: the new owner answers it
                    continue
                offsets[partition] = offset + 1
                try:
                    handled = state.handle(message.value())
                except MessageError as e:
                    counts.unreadable += 1
                    self.say(f"skipped {self.topics.commands}/{partition}@{offset}: {e}")
                    continue
                for subject in handled.new_keys:
                    key, value = self.keyring.record(subject, created_ts=int(time.time() * 1000))
                    producer.produce(self.topics.keys, key=key, value=value)
                for event in handled.events:
                    key, value = self.format.encode_event(event)
                    producer.produce(self.topics.events, key=key, value=value, partition=partition)
                key, value = self.format.encode_result(handled.result)
                producer.produce(self.topics.results, key=key, value=value, partition=partition)
                if handled.duplicate:
                    counts.duplicates += 1
                elif handled.result.accepted:
                    counts.accepted += 1
                else:
                    counts.rejected += 1
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
            self._restore(list(self.partitions))
            self._rewind(list(self.partitions))
            return
        self.counts.accepted += counts.accepted
        self.counts.rejected += counts.rejected
        self.counts.duplicates += counts.duplicates
        self.counts.unreadable += counts.unreadable

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        owned = [tp.partition for tp in partitions]
        self._restore(owned)
        self.say(f"assigned {self.topics.commands} partitions {sorted(self.partitions)}")

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.partitions.pop(tp.partition, None)

    def _rewind(self, owned: list[int]) -> None:
        """Seek the consumer back to the committed offsets of ``owned``."""
        assert self._consumer is not None
        wanted = [TopicPartition(self.topics.commands, p) for p in owned]
        for tp in self._consumer.committed(wanted, timeout=self.config.timeout_s):
            offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            self._consumer.seek(TopicPartition(self.topics.commands, tp.partition, offset))

    def _restore(self, owned: list[int]) -> None:
        """Rebuild the key ring and ``owned`` partitions' states from the topics."""
        self.keyring.keys.clear()  # the partitions' states share this one
        for message in self._read(self.topics.keys, None):
            self.keyring.apply(message.key(), message.value())
        for partition in owned:
            state: CommandPartition[S, C, E] = CommandPartition(
                decider=self.decider, types=self.types, format=self.format,
                keyring=self.keyring, personal=self.personal,
            )  # fmt: skip
            for message in self._read(self.topics.events, partition):
                state.restore_event(self.format.decode_event(message.value()))
            for message in self._read(self.topics.results, partition):
                state.restore_result(self.format.decode_result(message.value()))
            self.partitions[partition] = state

    def _read(self, topic: str, partition: int | None) -> list[Message]:
        """Every committed record of ``topic`` (one partition, or all), to its end."""
        reader = Consumer(
            self._client(
                **{
                    "group.id": f"{self.config.group_id}-restore",  # assign() only
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    "isolation.level": "read_committed",
                    "fetch.wait.max.ms": 50,
                }
            )
        )
        try:
            if partition is None:
                metadata = reader.list_topics(topic, timeout=self.config.timeout_s)
                wanted = list(metadata.topics[topic].partitions)
            else:
                wanted = [partition]
            reader.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in wanted])
            messages: list[Message] = []
            at_end: set[int] = set()
            deadline = time.monotonic() + self.config.timeout_s
            while len(at_end) < len(wanted):
                if time.monotonic() > deadline:
                    raise ProcessorError(f"cannot read {topic} to its end")
                for message in reader.consume(num_messages=1000, timeout=0.2):
                    error = message.error()
                    if error is None:
                        at_end.discard(message.partition() or 0)
                        messages.append(message)
                    elif error.code() == KafkaError._PARTITION_EOF:
                        at_end.add(message.partition() or 0)
                    else:
                        raise ProcessorError(f"cannot read {topic}: {error.str()}")
            return messages
        finally:
            reader.close()
