"""The partition of a key (riverbed.client.partitioner.murmur2_partition) is the one Kafka's Java
default partitioner picks: checked against Kafka's own test vectors and against librdkafka's
Java-compatible ``murmur2`` partitioner producing to a real broker."""

from __future__ import annotations

import random

import pytest
from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.broker import Broker
from riverbed.client.partitioner import murmur2, murmur2_partition

PARTITIONS = 7

# org.apache.kafka.common.utils.UtilsTest#testMurmur2 (signed Java ints).
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


def _signed(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


@pytest.mark.parametrize(("key", "expected"), KAFKA_VECTORS)
def test_murmur2_matches_kafka_s_test_vectors(key: bytes, expected: int) -> None:
    h = murmur2(key)
    assert 0 <= h < 1 << 32
    assert _signed(h) == expected
    # Utils.toPositive (h & 0x7fffffff), not abs(): they differ for negative hashes.
    assert murmur2_partition(key, 1000) == (expected & 0x7FFFFFFF) % 1000


def _keys() -> list[bytes]:
    rng = random.Random(20_260_101)
    keys = [rng.randbytes(rng.randrange(1, 40)) for _ in range(150)]
    # Keys as the capture makes them: JSON objects of the key columns.
    keys += [b'{"id":%d}' % rng.randrange(-(10**12), 10**12) for _ in range(40)]
    keys += [f'{{"name":"Zoë-{i}"}}'.encode() for i in range(10)]
    return keys


def test_the_partition_is_the_one_librdkafka_s_murmur2_partitioner_picks(broker: Broker) -> None:
    bootstrap = broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic("partitioned", num_partitions=PARTITIONS, replication_factor=1)]
    ).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2", "linger.ms": 5})
    keys = _keys()
    delivered: dict[bytes, int] = {}
    errors: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            errors.append(error)
            return
        key = message.key()
        partition = message.partition()
        assert isinstance(key, bytes) and partition is not None
        delivered[key] = partition

    for key in keys:
        producer.produce("partitioned", key=key, value=b"v", on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert errors == []
    assert len(delivered) == len(set(keys))
    assert {k: murmur2_partition(k, PARTITIONS) for k in keys} == delivered
    # The comparison means something: every partition was used, and hashes with the top
    # bit set (negative in Java) were among them.
    assert set(delivered.values()) == set(range(PARTITIONS))
    assert any(murmur2(k) >= 1 << 31 for k in keys)
    assert any(murmur2(k) < 1 << 31 for k in keys)
