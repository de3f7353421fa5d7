"""The demo's first sections: a topic of 3 partitions, a clickstream produced into it and
read back.

The clickstream is JSON events keyed by user, produced with an idempotent ``acks=all`` lz4
producer; reading them back shows the per-partition offsets, that every user's events stayed
in order (one key, one partition) and the throughput both ways.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.demo.console import kafka_config

__all__ = [
    "PAGES",
    "PARTITIONS",
    "TOPIC",
    "click_events",
    "consume_back",
    "create_topic",
    "produce",
]

TOPIC = "clicks"
PARTITIONS = 3
PAGES = ("/home", "/search", "/product/42", "/cart", "/checkout")
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def click_events(count: int, *, seed: int) -> list[tuple[str, dict[str, object]]]:
    """``count`` (user, event) pairs: 50 users, 10 ms of event time apart."""
    rng = random.Random(seed)
    events = []
    for i in range(count):
        user = f"u{rng.randrange(50):03d}"
        page = rng.choice(PAGES)
        events.append(
            (user, {"event_id": f"e{i}", "user_id": user, "page": page, "ts": START_MS + i * 10})
        )
    return events


def create_topic(bootstrap: str) -> None:
    admin = AdminClient(kafka_config(bootstrap))
    admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS)])[TOPIC].result(30)
    metadata = admin.list_topics(TOPIC, timeout=10)
    print(f"cluster {metadata.cluster_id}, partitions {sorted(metadata.topics[TOPIC].partitions)}")


def produce(bootstrap: str, events: list[tuple[str, dict[str, object]]]) -> Producer:
    """Produce ``events`` and wait for every acknowledgement; the producer, for more."""
    producer = Producer(
        kafka_config(
            bootstrap, {"enable.idempotence": True, "compression.type": "lz4", "linger.ms": 5}
        )
    )
    started = time.perf_counter()
    for user, event in events:
        while True:
            try:
                producer.produce(TOPIC, key=user, value=json.dumps(event))
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(60) != 0:
        raise SystemExit("demo: some events were not delivered")
    seconds = time.perf_counter() - started
    print(
        f"{len(events):,} events acknowledged in {seconds:.2f} s ({len(events) / seconds:,.0f}/s)"
    )
    return producer


def consume_back(bootstrap: str) -> int:
    """Read the topic from the beginning to its end; how many events it holds."""
    consumer = Consumer(
        kafka_config(
            bootstrap,
            {
                "group.id": "demo",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                # librdkafka pauses fetching for 1 s whenever its local queue is full;
                # a short pause keeps a Python loop fed (see BENCHMARKS.md).
                "fetch.queue.backoff.ms": 10,
            },
        )
    )
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    started = time.perf_counter()
    per_partition: Counter[int | None] = Counter()
    last_ts: dict[str, int] = {}
    in_order = True
    eof: set[int | None] = set()
    first = None
    while len(eof) < PARTITIONS:
        for message in consumer.consume(num_messages=10_000, timeout=0.2):
            error, value = message.error(), message.value()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise SystemExit(f"demo: {error}")
                eof.add(message.partition())
                continue
            assert value is not None  # every click has a value (no tombstones)
            event = json.loads(value)
            first = first or (message.partition(), message.offset(), event)
            per_partition[message.partition()] += 1
            in_order &= last_ts.get(event["user_id"], -1) < event["ts"]
            last_ts[event["user_id"]] = event["ts"]
    seconds = time.perf_counter() - started
    consumer.close()
    total = sum(per_partition.values())
    print(f"{total:,} events read in {seconds:.2f} s ({total / seconds:,.0f}/s)")
    for partition in range(PARTITIONS):
        print(f"  partition {partition}: offsets 0..{per_partition[partition] - 1}")
    print(f"every user's events in order: {in_order}")
    if first is not None:
        print(f"first record: partition {first[0]} offset {first[1]} -> {first[2]}")
    return total
