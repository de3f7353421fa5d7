"""The demo's consumer-group section: two consumers share the clickstream, then the group's lag.

Two members of the group ``click-readers`` split the topic's partitions between them and
read every event once, committing as they go; after both have left, more events arrive and
the demo shows, per partition, the group's committed offset, the log end and the lag.
"""

from __future__ import annotations

import json
import threading
import time

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from riverbed.demo.clickstream import TOPIC
from riverbed.demo.console import kafka_config

__all__ = ["GROUP", "GroupReader", "share_in_a_group"]

GROUP = "click-readers"
MORE_EVENTS = 1_000
"""Events produced after the readers have left, the lag the demo then shows."""


class GroupReader:
    """One member of a consumer group, reading on its own thread and committing as it goes."""

    def __init__(self, bootstrap: str, name: str) -> None:
        self.name = name
        self.partitions: set[int] = set()
        self.seen: list[tuple[int | None, int | None]] = []
        """(partition, offset) of every event read."""
        self._consumer = Consumer(
            kafka_config(
                bootstrap,
                {
                    "group.id": GROUP,
                    "client.id": name,
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                },
            )
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name)

    def start(self) -> None:
        self._consumer.subscribe([TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self._thread.start()

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.partitions |= {p.partition for p in partitions}

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.partitions -= {p.partition for p in partitions}

    def _run(self) -> None:
        while not self._stop.is_set():
            batch = self._consumer.consume(num_messages=5_000, timeout=0.1)
            records = [m for m in batch if m.error() is None]
            if records:
                self.seen.extend((m.partition(), m.offset()) for m in records)
                self._consumer.commit(asynchronous=False)  # at least once: after processing

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._consumer.close()  # leaves the group


def share_in_a_group(bootstrap: str, *, total: int, producer: Producer) -> None:
    """Two readers share the topic's ``total`` events; then :data:`MORE_EVENTS` more are
    produced with ``producer`` and the group's lag is shown."""
    readers = [GroupReader(bootstrap, name) for name in ("reader-1", "reader-2")]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + 60
    while sum(len(r.seen) for r in readers) < total and time.monotonic() < deadline:
        time.sleep(0.05)
    seen = [position for reader in readers for position in reader.seen]
    for reader in readers:
        print(
            f"  {reader.name}: partitions {sorted(reader.partitions)}, "
            f"read {len(reader.seen):,} events"
        )
    print(f"together {len(seen):,} of {total:,} events, each read once: {len(set(seen)) == total}")
    for reader in readers:
        reader.close()

    for i in range(MORE_EVENTS):
        producer.produce(TOPIC, key=f"u{i % 50:03d}", value=json.dumps({"late": i}))
    producer.flush(30)
    admin = AdminClient(kafka_config(bootstrap))
    request = [ConsumerGroupTopicPartitions(GROUP)]
    committed = admin.list_consumer_group_offsets(request)[GROUP].result(30)
    watermarks = Consumer(kafka_config(bootstrap, {"group.id": "demo-watermarks"}))
    print(f"after {MORE_EVENTS:,} more events, the group's lag (both readers have left):")
    for position in sorted(committed.topic_partitions, key=lambda tp: tp.partition):
        _, end = watermarks.get_watermark_offsets(position, timeout=10)
        print(
            f"  partition {position.partition}: committed {position.offset:,}, "
            f"log end {end:,}, lag {end - position.offset:,}"
        )
    watermarks.close()
