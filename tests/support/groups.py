"""Consumer groups as the group tests drive them with librdkafka: classic and KIP-848
consumers, numbered records to share out, and a round-robin poll that commits."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Message, Producer


def produce(bootstrap: str, topic: str, count: int, *, start: int = 0, partitions: int = 6) -> None:
    """Values ``start .. start + count - 1`` as text, round-robin over ``partitions``."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(start, start + count):
        producer.produce(topic, value=b"%d" % i, partition=i % partitions)
    assert producer.flush(30) == 0


def consumer(bootstrap: str, group: str, **extra: object) -> Consumer:
    """A member of a classic group (librdkafka's default protocol), from the earliest offsets."""
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 300,
    }
    config.update(extra)
    return Consumer(config)


def kip848_consumer(bootstrap: str, group: str, **extra: str) -> Consumer:
    """A member of a consumer-protocol group (KIP-848), from the earliest offsets."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **extra,
        }
    )


def poll_all(
    consumers: list[Consumer], want: int, *, timeout_s: float = 30, commit: bool = True
) -> dict[int, list[Message]]:
    """Poll round-robin until ``want`` records in all; commit each consumer's progress."""
    got: dict[int, list[Message]] = {i: [] for i in range(len(consumers))}
    deadline = time.monotonic() + timeout_s
    while sum(map(len, got.values())) < want:
        assert time.monotonic() < deadline, {i: len(v) for i, v in got.items()}
        for i, c in enumerate(consumers):
            message = c.poll(0.05)
            if message is None:
                continue
            assert not message.error(), message.error()
            got[i].append(message)
            if commit:
                c.commit(message=message, asynchronous=False)
    return got


def values(messages: list[Message]) -> list[int]:
    """The numbers :func:`produce` wrote, as the messages carry them."""
    return [int(m.value()) for m in messages]  # type: ignore[arg-type]
