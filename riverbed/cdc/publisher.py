"""The Kafka side of the capture: compacted topics, an idempotent producer, and what has been
acknowledged.

- :meth:`Publisher.ensure_topics` creates the ``PREFIX.SCHEMA.TABLE`` topics that are
  missing, compacted (``cleanup.policy=compact``), so the topic converges to the table.
- :meth:`Publisher.send` produces a record with ``enable.idempotence`` and ``acks=all``
  (librdkafka retries without duplicating or reordering). The partition is chosen as Kafka's
  Java clients (and Debezium, and Spark) choose it: murmur2 of the key.
- Records are produced inside *units* (a transaction of the database): :meth:`end_unit`
  closes one with the position that may be confirmed once all of its records are
  acknowledged; :meth:`confirmable` is the latest such position whose records, and every
  earlier unit's, the broker acknowledged. The capture confirms only that to PostgreSQL.
- :meth:`resume_positions` reads the last records of each partition: after a crash the
  database replays the transactions not yet confirmed, and the capture skips the records a
  partition already has (their :class:`~riverbed.cdc.changes.Position` header says so).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    NewTopic,
)

from riverbed.cdc.changes import POSITION_HEADER, Position, Record
from riverbed.cdc.errors import CaptureError
from riverbed.client.partitioner import murmur2_partition

__all__ = ["STATE_TOPIC", "Publisher"]

_LOG = logging.getLogger("riverbed.cdc.librdkafka")
"""librdkafka's log of the publisher's clients: Python shows its warnings and errors and,
unless logging is configured otherwise, drops the rest. The errors the capture acts on come
through ``error_cb`` and delivery reports, not through this log."""

STATE_TOPIC = "riverbed-cdc-offsets"
"""Where the capture records, per slot, that its initial snapshot is complete (compacted,
like Kafka Connect's ``connect-offsets``)."""

READ_BACK = 1000
"""How many records per partition are read back at first to find the last position."""


@dataclass(slots=True)
class _Unit:
    outstanding: int = 0
    end: int | None = None  # set when the unit is closed


class Publisher:
    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str,
        topic_config: Mapping[str, str] | None = None,
        partitions: int = 1,
        timeout_s: float = 30.0,
        producer_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self._errors: list[KafkaError] = []
        base: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "logger": _LOG,
            "error_cb": self._errors.append,
        }
        self._base = base
        self._topic_config = {"cleanup.policy": "compact", **(topic_config or {})}
        self._partitions = partitions
        self._admin = AdminClient(base)
        self._producer = Producer(
            {
                **base,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "queue.buffering.max.messages": 500_000,
                **(producer_config or {}),
            }
        )
        self._partition_counts: dict[str, int] = {}
        self._resume: dict[tuple[str, int], Position] = {}
        self._units: deque[_Unit] = deque([_Unit()])
        self._confirmable: int | None = None
        self._failure: str | None = None
        self.skipped = 0

    # -- topics ----------------------------------------------------------------------------

    def check_reachable(self, timeout_s: float) -> None:
        """Fail with a clear CaptureError when no broker answers within ``timeout_s``."""
        try:
            self._admin.list_topics(timeout=timeout_s)
        except KafkaException as e:
            cause = self._errors[-1].str() if self._errors else str(e)
            raise CaptureError(
                f"no broker reachable at {self.bootstrap} within {timeout_s:g} s: {cause}"
            ) from None

    def ensure_topics(self, topics: Iterable[str]) -> None:
        """Create the missing topics (compacted) and learn every topic's partition count."""
        wanted = sorted(set(topics) - set(self._partition_counts))
        if not wanted:
            return
        metadata = self._admin.list_topics(timeout=self.timeout_s)
        missing = [t for t in wanted if t not in metadata.topics or metadata.topics[t].error]
        if missing:
            futures = self._admin.create_topics(
                [
                    NewTopic(
                        t,
                        num_partitions=1 if t == STATE_TOPIC else self._partitions,
                        config=dict(self._topic_config),
                    )
                    for t in missing
                ],
                request_timeout=self.timeout_s,
            )
            for topic, future in futures.items():
                try:
                    future.result()
                except KafkaException as e:
                    if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise CaptureError(
                            f"cannot create topic {topic}: {e.args[0].str()}"
                        ) from None
        deadline = time.monotonic() + self.timeout_s
        while True:  # the first listing serves when nothing had to be created
            ready = {
                t: len(metadata.topics[t].partitions)
                for t in wanted
                if t in metadata.topics and not metadata.topics[t].error
            }
            if len(ready) == len(wanted) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
            metadata = self._admin.list_topics(timeout=self.timeout_s)
        if len(ready) != len(wanted):
            raise CaptureError(f"topics not ready in time: {sorted(set(wanted) - set(ready))}")
        self._partition_counts.update(ready)

    def resume_positions(self, topics: Iterable[str]) -> dict[tuple[str, int], Position]:
        """The position of the last streamed record in each partition of ``topics``."""
        consumer = Consumer(
            {
                **self._base,
                "group.id": "riverbed-cdc-resume",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_uncommitted",
            }
        )
        try:
            for topic in topics:
                for partition in range(self._partition_counts[topic]):
                    found = self._last_position(consumer, topic, partition)
                    if found is not None:
                        self._resume[(topic, partition)] = found
        finally:
            consumer.close()
        return dict(self._resume)

    def _last_position(self, consumer: Consumer, topic: str, partition: int) -> Position | None:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=self.timeout_s
        )
        window = READ_BACK
        while high > low:
            start = max(low, high - window)
            found = None
            for message in _read_range(consumer, topic, partition, start, high, self.timeout_s):
                for header in message.headers() or ():
                    if header[0] == POSITION_HEADER and header[1] is not None:
                        found = Position.from_header(header[1])
            if found is not None or start == low:
                return found
            window *= 10
        return None

    # -- the capture's own state -----------------------------------------------------------

    def read_state(self, key: bytes) -> bytes | None:
        """The latest value for ``key`` in the state topic (None: none, or a tombstone)."""
        self.ensure_topics([STATE_TOPIC])
        consumer = Consumer(
            {
                **self._base,
                "group.id": "riverbed-cdc-state",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
        value = None
        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(STATE_TOPIC, 0), timeout=self.timeout_s
            )
            if high > low:
                for message in _read_range(consumer, STATE_TOPIC, 0, low, high, self.timeout_s):
                    if message.key() == key:
                        value = message.value()
        finally:
            consumer.close()
        return value

    def write_state(self, key: bytes, value: bytes | None) -> None:
        """Write ``key`` = ``value`` (None: delete it) to the state topic and wait for the ack."""
        self.ensure_topics([STATE_TOPIC])
        self._producer.produce(
            STATE_TOPIC,
            key=key,
            value=value,
            partition=0,
            on_delivery=lambda error, message: self._delivered(_Unit(1), error),
        )
        self.flush()

    # -- producing -------------------------------------------------------------------------

    def send(self, record: Record) -> bool:
        """Produce ``record`` in the open unit; False if the partition already has it."""
        count = self._partition_counts.get(record.topic)
        if count is None:
            self.ensure_topics([record.topic])
            count = self._partition_counts[record.topic]
        partition = 0 if count == 1 else murmur2_partition(record.key, count)
        if record.position is not None:
            last = self._resume.get((record.topic, partition))
            if last is not None and record.position <= last:
                self.skipped += 1
                return False
        unit = self._units[-1]
        headers: list[tuple[str, str | bytes | None]] | None = None
        if record.position is not None:
            headers = [(POSITION_HEADER, record.position.header())]
        while True:
            try:
                self._producer.produce(
                    record.topic,
                    value=record.value,
                    key=record.key,
                    partition=partition,
                    headers=headers,
                    on_delivery=lambda error, message: self._delivered(unit, error),
                )
                break
            except BufferError:  # the local queue is full: serve deliveries, then retry
                self._producer.poll(0.05)
                self.check()
        unit.outstanding += 1
        return True

    def end_unit(self, end: int) -> None:
        """Close the open unit: ``end`` is confirmable once its records are acknowledged."""
        self._units[-1].end = end
        self._units.append(_Unit())
        self._advance()

    def _delivered(self, unit: _Unit, error: KafkaError | None) -> None:
        if error is not None:
            self._failure = self._failure or f"the broker refused a change: {error.str()}"
            return
        unit.outstanding -= 1

    def _advance(self) -> None:
        units = self._units
        while len(units) > 1 and units[0].outstanding == 0 and units[0].end is not None:
            self._confirmable = units.popleft().end

    def poll(self, timeout_s: float = 0.0) -> None:
        self._producer.poll(timeout_s)
        self._advance()
        self.check()

    def check(self) -> None:
        """Raise CaptureError if a record failed or the producer hit a fatal error."""
        fatal = next((e for e in self._errors if e.fatal()), None)
        if fatal is not None:
            raise CaptureError(f"the producer failed: {fatal.str()}")
        if self._failure is not None:
            raise CaptureError(self._failure)

    def confirmable(self) -> int | None:
        """The latest unit end whose records (and all before) are acknowledged."""
        self._advance()
        return self._confirmable

    def pending(self) -> bool:
        """Whether a closed unit still waits for acknowledgements."""
        return len(self._units) > 1

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every record is acknowledged (or fail)."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while len(self._producer) > 0:
            self.poll(0.05)
            if time.monotonic() > deadline:
                raise CaptureError(
                    f"the broker at {self.bootstrap} did not acknowledge "
                    f"{len(self._producer)} records in time"
                )
        self.poll(0)

    def close(self) -> None:
        self._producer.flush(5)


def _read_range(
    consumer: Consumer, topic: str, partition: int, start: int, end: int, timeout_s: float
) -> Iterable[Message]:
    """The records of [start, end) of one partition (compaction gaps are fine)."""
    consumer.assign([TopicPartition(topic, partition, start if start > 0 else OFFSET_BEGINNING)])
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                return
            raise CaptureError(f"cannot read {topic}[{partition}]: {error.str()}")
        offset = message.offset()
        if offset is not None and offset >= end:
            return
        yield message
        if offset is not None and offset >= end - 1:
            return
    raise CaptureError(f"reading {topic}[{partition}] back timed out")
