"""Transactions as the tests use them: a librdkafka transactional producer, the values of
records read with :func:`riverbed.testing.topic_reader.read_to_end` under an isolation level,
and a DescribeTransactions answer for fake brokers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from confluent_kafka import Producer

from riverbed.protocol import ApiKey
from riverbed.testing.topic_reader import TopicRecord

DESCRIBE, LIST = ApiKey.DESCRIBE_TRANSACTIONS, ApiKey.LIST_TRANSACTIONS


def txn_producer(bootstrap: str, transactional_id: str, **extra: Any) -> Producer:
    """A transactional producer, initialised (InitProducerId done)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 1,
            **extra,
        }
    )
    producer.init_transactions(30)
    return producer


def values(records: Sequence[TopicRecord]) -> list[bytes | None]:
    return [record.value for record in records]


def describe_answer(*start_times_ms: int) -> dict[str, Any]:
    """A DescribeTransactions response body: transactions ``t0``, ``t1`` ... started at
    ``start_times_ms`` (one that started, at a time above 0, holds partitions 0 and 2 of
    topic ``t``)."""
    states = [
        {"transactional_id": f"t{i}", "transaction_state": "Empty", "transaction_timeout": 60_000,
         "transaction_start_time": start, "producer_id": i, "producer_epoch": 0,
         "topics": [{"topic": "t", "partitions": [0, 2]}] if start > 0 else []}
        for i, start in enumerate(start_times_ms)
    ]  # fmt: skip
    return {"throttle_time": 0, "transaction_states": states}
