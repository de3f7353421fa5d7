"""DeleteRecords through confluent-kafka and kafka-python: the earliest offset moves (and
stays moved across a restart), consumers below it reset by auto.offset.reset, and the
refusals Kafka gives (past the high watermark, unknown partition, compacted or internal)."""

from __future__ import annotations

import datetime
import time
import warnings
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kio.schema.delete_records.v2.request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName

from riverbed.broker import Broker
from riverbed.protocol import ApiKey
from tests.support.wire import WireClient

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from kafka import TopicPartition as KafkaPythonPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import InvalidTopicError, OffsetOutOfRangeError, PolicyViolationError


def setup_topic(bootstrap: str, topic: str, *, records: int, **configs: str) -> AdminClient:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, config=configs)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(records):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
        producer.flush(30)  # one batch each, so an offset can fall inside the log
    return admin


def delete_before(admin: AdminClient, topic: str, offset: int) -> int:
    partition = TopicPartition(topic, 0, offset)
    deleted = admin.delete_records([partition])[partition].result(timeout=30)
    low_watermark: int = deleted.low_watermark
    return low_watermark


def earliest(admin: AdminClient, topic: str, *, spec: OffsetSpec | None = None) -> int:
    """ListOffsets: the partition's earliest offset (or another ``spec``)."""
    partition = TopicPartition(topic, 0)
    wanted = {partition: spec or OffsetSpec.earliest()}
    found = admin.list_offsets(wanted)[partition].result(timeout=30)
    offset: int = found.offset
    return offset


def first_offset_read(bootstrap: str, topic: str, *, group: str, reset: str) -> int:
    """The offset of the first record a consumer of ``group`` reads, producing a record per
    poll meanwhile (a consumer reset to the end reads only what comes after)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": reset}
    )
    producer = Producer({"bootstrap.servers": bootstrap})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                offset: int = message.offset()
                return offset
            producer.produce(topic, value=b"meanwhile")
            producer.flush(30)
        raise AssertionError("nothing was read")
    finally:
        consumer.close()


def commit(bootstrap: str, topic: str, *, group: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    consumer.close()


def test_delete_records_moves_the_earliest_offset_and_never_back(broker: Broker) -> None:
    bootstrap = broker.bootstrap_servers
    admin = setup_topic(bootstrap, "trimmed", records=10)
    assert delete_before(admin, "trimmed", 4) == 4
    assert earliest(admin, "trimmed") == 4
    assert delete_before(admin, "trimmed", 2) == 4, "the log start offset never moves down"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    assert consumer.get_watermark_offsets(TopicPartition("trimmed", 0), timeout=30) == (4, 10)
    consumer.close()
    assert delete_before(admin, "trimmed", -1) == 10  # OFFSET_END: up to the high watermark
    assert earliest(admin, "trimmed") == 10


def test_consumers_below_the_new_start_reset_by_auto_offset_reset(broker: Broker) -> None:
    bootstrap = broker.bootstrap_servers
    admin = setup_topic(bootstrap, "reset", records=10)
    commit(bootstrap, "reset", group="early", offset=2)
    commit(bootstrap, "reset", group="late", offset=2)
    assert delete_before(admin, "reset", 6) == 6
    assert first_offset_read(bootstrap, "reset", group="early", reset="earliest") == 6
    end = earliest(admin, "reset", spec=OffsetSpec.latest())
    assert first_offset_read(bootstrap, "reset", group="late", reset="latest") >= end > 6


def test_the_new_start_survives_a_restart(tmp_path: Path) -> None:
    with Broker(tmp_path / "data", listen="127.0.0.1:0") as first:
        admin = setup_topic(first.bootstrap_servers, "durable", records=5)
        assert delete_before(admin, "durable", 3) == 3
    with Broker(tmp_path / "data", listen="127.0.0.1:0") as second:
        admin = AdminClient({"bootstrap.servers": second.bootstrap_servers})
        assert earliest(admin, "durable") == 3


def refusal(admin: AdminClient, topic: str, offset: int) -> int:
    with pytest.raises(KafkaException) as raised:
        delete_before(admin, topic, offset)
    code: int = raised.value.args[0].code()
    return code


def test_refusals(broker: Broker) -> None:
    bootstrap = broker.bootstrap_servers
    admin = setup_topic(bootstrap, "short", records=3)
    assert refusal(admin, "short", 4) == KafkaError.OFFSET_OUT_OF_RANGE
    setup_topic(bootstrap, "compacted", records=1, **{"cleanup.policy": "compact"})
    assert refusal(admin, "compacted", 1) == KafkaError.POLICY_VIOLATION
    assert earliest(admin, "short") == 0
    assert earliest(admin, "compacted") == 0


def test_kafka_python_delete_records(broker: Broker) -> None:
    bootstrap = broker.bootstrap_servers
    setup_topic(bootstrap, "kp-trim", records=5)
    commit(bootstrap, "kp-trim", group="g", offset=1)  # creates __consumer_offsets
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        partition = KafkaPythonPartition("kp-trim", 0)
        result = admin.delete_records({partition: 3})
        assert result[partition]["low_watermark"] == 3
        with pytest.raises(OffsetOutOfRangeError):
            admin.delete_records({partition: 6})
        with pytest.raises(InvalidTopicError):
            admin.delete_records({KafkaPythonPartition("__consumer_offsets", 0): 0})
        setup_topic(bootstrap, "kp-compacted", records=1, **{"cleanup.policy": "compact"})
        with pytest.raises(PolicyViolationError):
            admin.delete_records({KafkaPythonPartition("kp-compacted", 0): 0})
    finally:
        admin.close()
    assert earliest(AdminClient({"bootstrap.servers": bootstrap}), "kp-trim") == 3


def test_on_the_wire_every_partition_gets_its_own_answer(broker: Broker) -> None:
    setup_topic(broker.bootstrap_servers, "wired", records=4)
    wanted = [("wired", 0, 2), ("wired", 1, 0), ("absent", 0, 0), ("wired", 0, -2)]
    request = DeleteRecordsRequest(
        topics=tuple(
            DeleteRecordsTopic(
                name=TopicName(topic),
                partitions=(DeleteRecordsPartition(partition_index=partition, offset=offset),),
            )
            for topic, partition, offset in wanted
        ),
        timeout=datetime.timedelta(seconds=5),
    )
    with WireClient(broker.bootstrap_servers) as client:
        response = client.request(ApiKey.DELETE_RECORDS, 2, request)
    answers = [
        (t.name, p.partition_index, p.error_code, p.low_watermark)
        for t in response.topics
        for p in t.partitions
    ]
    assert answers == [
        ("wired", 0, ErrorCode.none, 2),
        ("wired", 1, ErrorCode.unknown_topic_or_partition, -1),
        ("absent", 0, ErrorCode.unknown_topic_or_partition, -1),
        ("wired", 0, ErrorCode.offset_out_of_range, -1),
    ]
