"""The demo's exactly-once section: consume-transform-produce in Kafka transactions.

A job copies each click's page from ``clicks`` to ``click-pages``, one transaction per batch
of up to 5,000 clicks: each output and the input offsets it was made from are committed
together, so every click is copied once. Then one transaction of junk is aborted on purpose,
and a read_committed and a read_uncommitted reader count what they see.
"""

from __future__ import annotations

import json
import time

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from riverbed.demo.clickstream import PARTITIONS, TOPIC
from riverbed.demo.console import kafka_config
from riverbed.testing.topic_reader import READ_COMMITTED, READ_UNCOMMITTED, count_to_end

__all__ = ["EOS_GROUP", "EOS_TOPIC", "copy_exactly_once"]

EOS_TOPIC = "click-pages"
EOS_GROUP = "click-pages-job"
JUNK_RECORDS = 100


def copy_exactly_once(bootstrap: str, *, total: int) -> None:
    """Copy the ``total`` clicks to :data:`EOS_TOPIC` in transactions, abort one of junk,
    and count what each isolation level reads."""
    admin = AdminClient(kafka_config(bootstrap))
    admin.create_topics([NewTopic(EOS_TOPIC, num_partitions=PARTITIONS)])[EOS_TOPIC].result(30)
    consumer = Consumer(
        kafka_config(
            bootstrap,
            {
                "group.id": EOS_GROUP,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "fetch.queue.backoff.ms": 10,
            },
        )
    )
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    producer = Producer(kafka_config(bootstrap, {"transactional.id": EOS_GROUP, "linger.ms": 5}))
    producer.init_transactions(30)
    started = time.perf_counter()
    copied, transactions, eof = 0, 0, set[int | None]()
    while len(eof) < PARTITIONS:
        batch: list[Message] = []
        for message in consumer.consume(num_messages=5_000, timeout=0.2):
            error = message.error()
            if error is None:
                batch.append(message)
            elif error.code() == KafkaError._PARTITION_EOF:
                eof.add(message.partition())
        if not batch:
            continue
        producer.begin_transaction()
        next_offsets: dict[int, int] = {}
        for message in batch:
            value, partition, offset = message.value(), message.partition(), message.offset()
            assert value is not None and partition is not None and offset is not None  # a click
            page = json.loads(value).get("page", "(late event)")
            producer.produce(EOS_TOPIC, key=message.key(), value=page)
            next_offsets[partition] = offset + 1
        offsets = [TopicPartition(TOPIC, p, o) for p, o in next_offsets.items()]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        copied += len(batch)
        transactions += 1
    producer.begin_transaction()
    for i in range(JUNK_RECORDS):
        producer.produce(EOS_TOPIC, key=b"junk", value=f"junk-{i}")
    producer.flush(30)
    producer.abort_transaction(30)
    elapsed = time.perf_counter() - started
    consumer.close()
    producer.close()
    print(
        f"{copied:,} clicks copied in {transactions} transactions in {elapsed:.2f} s, "
        f"then {JUNK_RECORDS} junk records written and aborted"
    )
    committed = count_to_end(bootstrap, EOS_TOPIC, partitions=PARTITIONS, isolation=READ_COMMITTED)
    everything = count_to_end(
        bootstrap, EOS_TOPIC, partitions=PARTITIONS, isolation=READ_UNCOMMITTED
    )
    print(f"read_committed reader: {committed:,} records (each click once: {committed == total})")
    print(f"read_uncommitted reader: {everything:,} records (the aborted junk too)")
