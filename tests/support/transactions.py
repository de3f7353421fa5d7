"""librdkafka clients for the transaction tests: a transactional producer and a reader that
reads partitions to their end under one isolation level."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"


def txn_producer(bootstrap: str, transactional_id: str, **extra: Any) -> Producer:
    """A transactional producer, initialised (InitProducerId done)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 1,
            **extra,
        }
    )
    producer.init_transactions(30)
    return producer


def read_all(
    bootstrap: str, topic: str, *, partitions: int, isolation: str, timeout_s: float = 20
) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(partition, offset, key, value) of every record a consumer with ``isolation`` gets
    from offset 0 to the end (the last stable offset for read_committed) of each partition."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "txn-reader",  # assign() only: no membership, no commits
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 50,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records: list[tuple[int, int, bytes | None, bytes | None]] = []
    eof: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(eof) < partitions:
            assert time.monotonic() < deadline, f"no end of partition after {len(records)}"
            # consume() waits for all num_messages or the timeout: keep the timeout short.
            for message in consumer.consume(num_messages=10_000, timeout=0.1):
                error = message.error()
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF, error
                    eof.add(message.partition())
                else:
                    eof.discard(message.partition())
                    records.append(
                        (message.partition(), message.offset(), message.key(), message.value())
                    )
    finally:
        consumer.close()
    return records


def values(records: list[tuple[int, int, bytes | None, bytes | None]]) -> list[bytes | None]:
    return [value for _, _, _, value in records]
