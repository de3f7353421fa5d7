"""aiokafka (an asyncio client) against a real broker process."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from tests.support.brokers import BrokerProcess


def test_zstd_round_trip_with_topic_auto_creation(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap

    async def scenario() -> list[tuple[bytes | None, bytes | None]]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type="zstd")
        await producer.start()
        try:
            for i in range(500):
                await producer.send("aio-auto", key=f"k{i}".encode(), value=b"x" * i)
            await producer.flush()
        finally:
            await producer.stop()

        consumer = AIOKafkaConsumer(
            "aio-auto", bootstrap_servers=bootstrap, auto_offset_reset="earliest"
        )
        await consumer.start()
        received: list[tuple[bytes | None, bytes | None]] = []
        try:
            async with asyncio.timeout(30):
                while len(received) < 500:
                    batches = await consumer.getmany(timeout_ms=1000)
                    for records in batches.values():
                        received.extend((r.key, r.value) for r in records)
        finally:
            await consumer.stop()
        return received

    received = asyncio.run(scenario())
    assert received == [(f"k{i}".encode(), b"x" * i) for i in range(500)]
