"""A projection's model as a compacted changelog topic (the carts': ``shop.carts.state``).

    record     key {ID}, value the aggregate's state document (``AggregateType.document``),
               in the partition murmur2 of the key chooses (as Kafka's Java clients would)
    position   the committed offsets of the consumer group GROUP (default
               ``riverbed-es-project-TOPIC``) for the events topic's partitions

A batch is one Kafka transaction of the transactional id GROUP: the records of the
aggregates it changed, and its position (``send_offsets_to_transaction``) — exactly-once
consume-transform-produce, as Kafka Streams does it. A read_committed reader of the topic
sees every batch whole or not at all, so each aggregate's versions only increase.

**Crash behaviour.** A runner killed mid-transaction leaves it open; the next one's
``init_transactions`` (same transactional id) aborts it before anything is read, so the
records of the batch vanish for read_committed readers and the position is the one before
the batch. The runner's in-memory aggregates are restored by reading the topic itself
(read_committed, the last value per key), not by replaying the events from the start.

**Rebuild.** :meth:`ChangelogStore.clear` first commits the position 0 (a transaction with
only offsets), then deletes the topic and creates it anew, empty. Killed after the first
step, the next runner finds the old model at position 0: it folds every event again as a
repeat (the fold ignores versions the model has), which leaves the model as it is.

Two runners of the same model fence each other by the transactional id: the older one's
next commit fails for good.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.client.partitioner import murmur2_partition
from riverbed.client.reading import TopicReadError, read_to_end
from riverbed.eventsourcing.aggregate_type import AggregateType
from riverbed.eventsourcing.errors import MessageError
from riverbed.eventsourcing.handling import Aggregate
from riverbed.eventsourcing.messages import dumps, loads_object
from riverbed.eventsourcing.projections import (
    Batch,
    CommitFailed,
    ProjectionError,
    Restored,
)

__all__ = ["ChangelogStore"]

_LOG = logging.getLogger("riverbed.eventsourcing.librdkafka")

READ_TIMEOUT_S = 600.0
"""How long reading the whole topic back may take: 100,000 carts take ~1.5 s (2 vCPUs)."""

S = TypeVar("S")
C = TypeVar("C")
E = TypeVar("E")


class ChangelogStore(Generic[S, C, E]):
    """``kind``'s states in the compacted topic ``topic`` (see the module docstring)."""

    def __init__(
        self,
        kind: AggregateType[S, C, E],
        *,
        bootstrap: str,
        topic: str,
        group_id: str | None = None,
        transaction_timeout_ms: int = 10_000,
        timeout_s: float = 30,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        self.kind = kind
        self.bootstrap = bootstrap
        self.topic = topic
        self.group_id = group_id or f"riverbed-es-project-{topic}"
        self.transaction_timeout_ms = transaction_timeout_ms
        """How long a killed runner's open transaction holds back read_committed readers of
        the topic if no runner starts again (Kafka's default is 60 s)."""
        self.timeout_s = timeout_s
        self.extra = dict(extra or {})
        self._partitions = 0  # the events topic's
        self._topic_partitions = 0
        self._producer: Producer | None = None
        self._group: Consumer | None = None

    @property
    def name(self) -> str:
        return f"topic {self.topic}"

    def _client(self, **settings: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, "logger": _LOG, **self.extra, **settings}

    def start(self, *, partitions: int) -> None:
        self._partitions = partitions
        self._topic_partitions = self._ensure_topic()
        producer = Producer(
            self._client(
                **{
                    "transactional.id": self.group_id,
                    "transaction.timeout.ms": self.transaction_timeout_ms,
                    "linger.ms": 5,
                }
            )
        )
        try:
            producer.init_transactions(self.timeout_s)  # aborts a predecessor's transaction
        except KafkaException as e:
            raise ProjectionError(f"cannot start transactions: {e.args[0].str()}") from None
        self._producer = producer
        # Never assigned: only its group's committed offsets and metadata are used.
        self._group = Consumer(
            self._client(
                **{
                    "group.id": self.group_id,
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                }
            )
        )

    def clear(self) -> None:
        self._send_position({p: 0 for p in range(self._partitions)})
        admin = AdminClient(self._client())
        try:
            admin.delete_topics([self.topic])[self.topic].result(self.timeout_s)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise ProjectionError(f"cannot delete {self.topic}: {e.args[0].str()}") from None
        self._topic_partitions = self._ensure_topic()

    def restore(self) -> Restored[S]:
        assert self._group is not None
        latest: dict[bytes | None, Message] = {}

        def keep(message: Message) -> None:
            if message.value() is None:
                latest.pop(message.key(), None)
            else:
                latest[message.key()] = message

        try:
            read_to_end(
                self.bootstrap, self.topic, keep, timeout_s=READ_TIMEOUT_S,
                settings={"group.id": f"{self.group_id}-restore", **self.extra},
            )  # fmt: skip
        except TopicReadError as e:
            raise ProjectionError(f"cannot restore: {e}") from None
        aggregates: dict[str, Aggregate[S]] = {}
        for message in latest.values():
            try:
                aggregate = self.kind.aggregate_of(loads_object(message.value(), "state"))
            except MessageError as e:
                where = f"{self.topic}/{message.partition()}@{message.offset()}"
                raise ProjectionError(
                    f"cannot restore from {where}: {e} (--rebuild makes the model anew)"
                ) from None
            aggregates[aggregate.aggregate_id] = aggregate
        wanted = [TopicPartition(self.kind.topics.events, p) for p in range(self._partitions)]
        try:
            committed = self._group.committed(wanted, timeout=self.timeout_s)
        except KafkaException as e:
            raise ProjectionError(f"cannot read the position: {e.args[0].str()}") from None
        positions = {tp.partition: tp.offset for tp in committed if tp.offset >= 0}
        return Restored(aggregates=aggregates, positions=positions)

    def commit(self, batch: Batch[S]) -> None:
        assert self._producer is not None
        producer = self._producer
        try:
            producer.begin_transaction()
            for aggregate in batch.aggregates:
                key = self.kind.format.key(aggregate.aggregate_id)
                producer.produce(
                    self.topic, key=key, value=dumps(self.kind.document(aggregate)),
                    partition=murmur2_partition(key, self._topic_partitions),
                )  # fmt: skip
            self._offsets_and_commit(batch.positions)
        except KafkaException as e:
            self._failed(e)

    def close(self) -> None:
        if self._group is not None:
            self._group.close()
        if self._producer is not None:
            self._producer.flush(self.timeout_s)

    def _send_position(self, positions: Mapping[int, int]) -> None:
        assert self._producer is not None
        try:
            self._producer.begin_transaction()
            self._offsets_and_commit(positions)
        except KafkaException as e:
            self._failed(e)

    def _offsets_and_commit(self, positions: Mapping[int, int]) -> None:
        assert self._producer is not None and self._group is not None
        events = self.kind.topics.events
        self._producer.send_offsets_to_transaction(
            [TopicPartition(events, p, offset) for p, offset in sorted(positions.items())],
            self._group.consumer_group_metadata(),
            self.timeout_s,
        )
        self._producer.commit_transaction(self.timeout_s)

    def _failed(self, e: KafkaException) -> None:
        """A transaction that failed: aborted and :class:`CommitFailed`, or, fenced or
        failed for good, :class:`ProjectionError`."""
        assert self._producer is not None
        error = e.args[0]
        if error.fatal():
            raise ProjectionError(
                f"{self.topic}: fenced or failed for good (another runner of this model?): "
                f"{error.str()}"
            ) from None
        try:
            self._producer.abort_transaction(self.timeout_s)
        except KafkaException as abort_error:
            raise ProjectionError(f"cannot abort: {abort_error.args[0].str()}") from None
        raise CommitFailed(f"transaction aborted ({error.str()})") from None

    def _ensure_topic(self) -> int:
        """Create the topic if it is missing (compacted, as many partitions as the events
        topic); its partition count. Just after a delete, creating may fail a short while."""
        admin = AdminClient(self._client())
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                # Every topic's metadata, not this topic's: asked for by name, a missing topic
                # is created by the broker (auto.create.topics.enable) with its defaults,
                # not compacted, since librdkafka's admin client allows auto-creation.
                found = admin.list_topics(timeout=self.timeout_s).topics.get(self.topic)
            except KafkaException as e:
                raise ProjectionError(f"no broker at {self.bootstrap}: {e.args[0].str()}") from None
            if found is not None and found.error is None and found.partitions:
                return len(found.partitions)
            new = NewTopic(self.topic, num_partitions=self._partitions, replication_factor=1,
                           config={"cleanup.policy": "compact"})  # fmt: skip
            try:
                admin.create_topics([new])[self.topic].result(self.timeout_s)
            except KafkaException as e:
                code = e.args[0].code()
                if code != KafkaError.TOPIC_ALREADY_EXISTS or time.monotonic() > deadline:
                    raise ProjectionError(
                        f"cannot create {self.topic}: {e.args[0].str()}"
                    ) from None
                time.sleep(0.1)
