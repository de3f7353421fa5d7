"""Consumer groups with kafka-python, aiokafka and kcat; admin clients reading groups and lag."""

from __future__ import annotations

import asyncio
import subprocess
import time
import warnings

from aiokafka import AIOKafkaConsumer
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support.brokers import BrokerProcess, create_topic
from tests.support.groups import consumer, poll_all, produce, values

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # kafka-python's schema loading uses a deprecated API
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition


def kafka_python_consume(bootstrap: str, group: str, topic: str, count: int) -> list[int]:
    c = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=20_000,
    )
    got: list[int] = []
    for message in c:
        got.append(int(message.value))
        if len(got) == count:
            break
    c.commit()
    c.close()
    return got


def test_kafka_python_group_resumes_from_commits(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, "kp", partitions=3)
    produce(bootstrap, "kp", 90, partitions=3)
    first = kafka_python_consume(bootstrap, "kpg", "kp", 90)
    produce(bootstrap, "kp", 30, start=90, partitions=3)
    second = kafka_python_consume(bootstrap, "kpg", "kp", 30)
    assert sorted(first) == list(range(90))
    assert sorted(second) == list(range(90, 120)), "resumed at the committed offsets"


def test_aiokafka_group_resumes_from_commits(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, "aio", partitions=3)
    produce(bootstrap, "aio", 60, partitions=3)

    async def consume(count: int) -> list[int]:
        c = AIOKafkaConsumer(
            "aio",
            bootstrap_servers=bootstrap,
            group_id="aiog",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await c.start()
        got: list[int] = []
        try:
            while len(got) < count:
                batches = await asyncio.wait_for(c.getmany(timeout_ms=500), 30)
                for messages in batches.values():
                    got.extend(int(m.value) for m in messages)  # type: ignore[arg-type]
            await c.commit()
        finally:
            await c.stop()
        return got

    assert sorted(asyncio.run(consume(60))) == list(range(60))
    produce(bootstrap, "aio", 30, start=60, partitions=3)
    assert sorted(asyncio.run(consume(30))) == list(range(60, 90))


def test_kcat_balanced_consumer_reads_everything(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, "kc", partitions=4)
    produce(bootstrap, "kc", 80, partitions=4)
    done = subprocess.run(
        ["kcat", "-b", bootstrap, "-G", "kcg", "-o", "beginning", "-c", "80", "-f", "%s\n", "kc"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(int(v) for v in done.stdout.split()) == list(range(80))


def test_admin_clients_list_describe_and_read_offsets(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, "adm", partitions=2)
    produce(bootstrap, "adm", 20, partitions=2)
    member = consumer(bootstrap, "admg", **{"client.id": "the-client"})
    member.subscribe(["adm"])
    got = poll_all([member], 12)
    assert len(values(got[0])) == 12
    member.commit(
        offsets=[TopicPartition("adm", 0, 6, metadata="m0"), TopicPartition("adm", 1, 4)],
        asynchronous=False,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups().result(timeout=10)
    assert "admg" in {g.group_id for g in listed.valid}
    described = admin.describe_consumer_groups(["admg"])["admg"].result(timeout=10)
    assert described.state.name == "STABLE"
    assert described.partition_assignor == "range"
    (only,) = described.members
    assert only.client_id == "the-client" and only.host == "/127.0.0.1"
    assert {tp.partition for tp in only.assignment.topic_partitions} == {0, 1}
    request = [ConsumerGroupTopicPartitions("admg")]
    offsets = admin.list_consumer_group_offsets(request)["admg"].result(timeout=10)
    assert sorted((tp.partition, tp.offset) for tp in offsets.topic_partitions) == [(0, 6), (1, 4)]

    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        listed = {
            "group_id": "admg",
            "protocol_type": "consumer",
            "group_state": "Stable",
            "group_type": "classic",  # ListGroups v5
        }
        assert listed in kp.list_groups()
        group = kp.describe_groups(["admg"])["admg"]
        assert (group["group_state"], group["protocol_data"]) == ("Stable", "range")
        (described_member,) = group["members"]
        assert described_member["member_metadata"]["topics"] == ["adm"]
        assignment = described_member["member_assignment"]["assigned_partitions"]
        assert assignment == [{"topic": "adm", "partitions": [0, 1]}]
        committed = kp.list_group_offsets("admg")["admg"]
        assert committed[KpTopicPartition("adm", 0)].offset == 6
        # librdkafka sends the metadata string with its C terminator; stored as sent.
        assert committed[KpTopicPartition("adm", 0)].metadata.rstrip("\x00") == "m0"
        assert committed[KpTopicPartition("adm", 1)].offset == 4
    finally:
        kp.close()

    member.close()
    deadline = time.monotonic() + 10
    while True:
        described = admin.describe_consumer_groups(["admg"])["admg"].result(timeout=10)
        if described.state.name == "EMPTY" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert described.state.name == "EMPTY" and not described.members
    result = admin.delete_consumer_groups(["admg"])["admg"]
    assert result.result(timeout=10) is None
    assert "admg" not in {g.group_id for g in admin.list_consumer_groups().result(10).valid}
