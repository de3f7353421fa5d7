"""librdkafka through confluent-kafka against a real broker process."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from riverbed.testing.topic_reader import read_to_end
from tests.support.brokers import BrokerProcess


def test_idempotent_lz4_producer_keeps_per_key_order_and_dense_offsets(
    broker_process: BrokerProcess,
) -> None:
    bootstrap = broker_process.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("orders", num_partitions=4)])["orders"].result(timeout=30)

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": "lz4",
            "linger.ms": 5,
        }
    )
    delivered: list[tuple[int, int]] = []
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, message: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append((message.partition(), message.offset()))  # type: ignore[attr-defined]

    total = 20_000
    for i in range(total):
        key = f"user-{i % 37}"
        producer.produce("orders", key=key, value=f"{key}:{i}", on_delivery=on_delivery)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []
    assert len(delivered) == total

    by_partition: dict[int, list[int]] = defaultdict(list)
    for partition, offset in delivered:
        by_partition[partition].append(offset)
    assert len(by_partition) == 4, "keys spread over every partition"
    for offsets in by_partition.values():
        assert sorted(offsets) == list(range(len(offsets))), "offsets are dense from 0"

    messages = read_to_end(bootstrap, "orders", partitions=4)
    assert len(messages) == total
    seen_per_key: dict[bytes, list[int]] = defaultdict(list)
    partition_of_key: dict[bytes, int] = {}
    for message in messages:
        key, value = message.key, message.value
        assert key is not None and value is not None
        partition_of_key.setdefault(key, message.partition)
        assert partition_of_key[key] == message.partition, "one key, one partition"
        seen_per_key[key].append(int(value.split(b":")[1]))
    for key, sequence in seen_per_key.items():
        assert sequence == sorted(sequence), f"{key!r} out of order"
    assert sum(len(s) for s in seen_per_key.values()) == total


def test_admin_create_describe_partitions_and_delete(broker_process: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker_process.bootstrap})
    futures = admin.create_topics(
        [NewTopic("events", num_partitions=2, config={"retention.ms": "3600000"})]
    )
    futures["events"].result(timeout=30)

    with pytest.raises(KafkaException) as exists:
        admin.create_topics([NewTopic("events", num_partitions=1)])["events"].result(timeout=30)
    assert exists.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    with pytest.raises(KafkaException) as replicas:
        admin.create_topics([NewTopic("r3", num_partitions=1, replication_factor=3)])["r3"].result(
            timeout=30
        )
    assert replicas.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR

    resource = ConfigResource(ConfigResource.Type.TOPIC, "events")
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    assert configs["retention.ms"].value == "3600000"
    assert configs["segment.bytes"].value == str(1024**3)

    admin.create_partitions([NewPartitions("events", 5)])["events"].result(timeout=30)
    metadata = admin.list_topics(timeout=30)
    assert len(metadata.topics["events"].partitions) == 5
    assert metadata.cluster_id
    assert list(metadata.brokers) == [0]

    cluster = admin.describe_cluster().result(timeout=30)
    assert cluster.cluster_id == metadata.cluster_id
    assert cluster.controller.id == 0
    host, port = broker_process.bootstrap.rsplit(":", 1)
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == [(0, host, int(port))]

    admin.delete_topics(["events"])["events"].result(timeout=30)
    assert "events" not in admin.list_topics(timeout=30).topics


def test_produce_to_a_missing_topic_auto_creates_it(broker_process: BrokerProcess) -> None:
    producer = Producer({"bootstrap.servers": broker_process.bootstrap})
    producer.produce("created-on-demand", value=b"hello")
    assert producer.flush(30) == 0
    messages = read_to_end(broker_process.bootstrap, "created-on-demand", partitions=1)
    assert [m.value for m in messages] == [b"hello"]


def test_out_of_range_offset_resets_by_auto_offset_reset(broker_process: BrokerProcess) -> None:
    producer = Producer({"bootstrap.servers": broker_process.bootstrap})
    for i in range(10):
        producer.produce("reset-me", value=b"%d" % i)
    assert producer.flush(30) == 0
    for reset, expected in (("earliest", [b"%d" % i for i in range(10)]), ("latest", [b"new"])):
        consumer = Consumer(
            {
                "bootstrap.servers": broker_process.bootstrap,
                "group.id": "unused",
                "enable.auto.commit": False,
                "auto.offset.reset": reset,
            }
        )
        consumer.assign([TopicPartition("reset-me", 0, 1000)])  # past the end
        values = [m.value() for m in consumer.consume(20, timeout=2) if not m.error()]
        if reset == "latest":
            assert values == []  # reset to the end: nothing yet
            producer.produce("reset-me", value=b"new")
            assert producer.flush(30) == 0
            deadline = time.monotonic() + 30
            while not values and time.monotonic() < deadline:
                values = [m.value() for m in consumer.consume(20, timeout=0.5) if not m.error()]
        consumer.close()
        assert values == expected, reset
