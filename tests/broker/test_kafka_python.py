"""kafka-python (a pure-Python client) against a real broker process."""

from __future__ import annotations

import time
import warnings

from tests.support.brokers import BrokerProcess

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic


def test_gzip_round_trip_offsets_for_times_and_end_offsets(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("kp", num_partitions=2, replication_factor=1)])
    admin.close()

    base_ms = int(time.time() * 1000) - 100_000
    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip", linger_ms=5)
    for i in range(200):
        producer.send(
            "kp",
            key=f"k{i}".encode(),
            value=f"v{i}".encode() * 10,
            partition=i % 2,
            timestamp_ms=base_ms + i * 100,
            headers=[("h", f"{i}".encode())],
        )
    producer.flush(timeout=30)
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    partitions = [TopicPartition("kp", 0), TopicPartition("kp", 1)]
    consumer.assign(partitions)
    assert consumer.beginning_offsets(partitions) == {p: 0 for p in partitions}
    assert consumer.end_offsets(partitions) == {p: 100 for p in partitions}

    consumer.seek_to_beginning()
    received = []
    deadline = time.monotonic() + 30
    while len(received) < 200 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=1000).values():
            received.extend(records)
    assert len(received) == 200
    by_key = {r.key: r for r in received}
    record = by_key[b"k7"]
    assert record.value == b"v7" * 10
    assert record.partition == 1
    assert record.timestamp == base_ms + 700
    assert record.headers == [("h", b"7")]

    # Record i has timestamp base + 100 i; partition 0 holds the even i at offset i // 2.
    found = consumer.offsets_for_times({partitions[0]: base_ms + 1050, partitions[1]: base_ms})
    assert found[partitions[0]].offset == 6  # first even i with ts >= base+1050 is 12
    assert found[partitions[0]].timestamp == base_ms + 1200
    assert found[partitions[1]].offset == 0
    assert found[partitions[1]].timestamp == base_ms + 100
    future = consumer.offsets_for_times({partitions[0]: base_ms + 10**9})
    assert future[partitions[0]] is None
    consumer.close()
