"""Transactions with the other clients: aiokafka's and kafka-python's transactional
producers, checked with read_committed consumers of both and of librdkafka."""

from __future__ import annotations

import asyncio
import warnings

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

with warnings.catch_warnings():  # kafka-python's import uses a deprecated importlib API
    warnings.simplefilter("ignore")
    from kafka import KafkaConsumer, KafkaProducer

from riverbed.testing.topic_reader import READ_COMMITTED, READ_UNCOMMITTED, read_to_end
from tests.support.brokers import BrokerProcess, create_topic
from tests.support.transactions import values

pytestmark = pytest.mark.timeout(120)


def test_aiokafka_transactions_commit_and_abort(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap
    create_topic(bootstrap, "aio", partitions=2)

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-tx")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(5):
                    await producer.send("aio", value=f"kept-{i}".encode(), partition=i % 2)
            await producer.begin_transaction()
            await producer.send("aio", value=b"dropped", partition=0)
            await producer.abort_transaction()
        finally:
            await producer.stop()

    async def consume() -> list[bytes | None]:
        consumer = AIOKafkaConsumer(
            "aio",
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            isolation_level=READ_COMMITTED,
        )
        await consumer.start()
        got: list[bytes | None] = []
        try:
            async with asyncio.timeout(30):
                while len(got) < 5:
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        got.extend(r.value for r in records)
                # Nothing more comes: the aborted record stays hidden.
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend(r.value for r in records)
        finally:
            await consumer.stop()
        return got

    asyncio.run(produce())
    expected = sorted(f"kept-{i}".encode() for i in range(5))
    assert sorted(asyncio.run(consume())) == expected  # type: ignore[type-var]
    assert sorted(
        values(read_to_end(bootstrap, "aio", partitions=2, isolation=READ_COMMITTED))
    ) == (expected)
    uncommitted = values(read_to_end(bootstrap, "aio", partitions=2, isolation=READ_UNCOMMITTED))
    assert sorted(uncommitted) == sorted([*expected, b"dropped"])  # type: ignore[type-var]


def test_kafka_python_transactions_commit_and_abort(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap
    create_topic(bootstrap, "kp", partitions=2)
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kp-tx")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(5):
            producer.send("kp", value=f"kept-{i}".encode(), partition=i % 2)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send("kp", value=b"dropped", partition=1)
        producer.abort_transaction()
    finally:
        producer.close()

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        isolation_level=READ_COMMITTED,
        consumer_timeout_ms=3000,
        enable_auto_commit=False,
    )
    try:
        consumer.subscribe(["kp"])
        got = sorted(record.value for record in consumer)
    finally:
        consumer.close()
    expected = sorted(f"kept-{i}".encode() for i in range(5))
    assert got == expected
    assert sorted(values(read_to_end(bootstrap, "kp", partitions=2, isolation=READ_COMMITTED))) == (
        expected
    )
