"""Transactions with librdkafka against a broker process: visibility under both isolation
levels, zombie fencing, the abandoned-transaction timeout, and read_committed offsets."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from riverbed.testing.topic_reader import READ_COMMITTED, READ_UNCOMMITTED, read_to_end
from tests.support.brokers import BrokerProcess, create_topic, start_broker_process
from tests.support.transactions import txn_producer, values

pytestmark = pytest.mark.timeout(120)


def _with_topic_t(broker: BrokerProcess, *, partitions: int) -> str:
    """The broker's bootstrap address, once topic "t" exists with ``partitions``."""
    create_topic(broker.bootstrap, "t", partitions=partitions)
    return broker.bootstrap


def _produce(producer: Producer, items: list[bytes], *, partitions: int = 2) -> None:
    """``items`` to topic "t", round robin over its ``partitions``, flushed."""
    for i, value in enumerate(items):
        producer.produce("t", value=value, key=value, partition=i % partitions)
    producer.flush(30)


def _open_transaction(
    bootstrap: str, transactional_id: str, items: list[bytes], *, partitions: int = 2, **extra: Any
) -> Producer:
    """A new producer of ``transactional_id`` with ``items`` produced in an open transaction."""
    producer = txn_producer(bootstrap, transactional_id, **extra)
    producer.begin_transaction()
    _produce(producer, items, partitions=partitions)
    return producer


def test_committed_data_is_visible_to_read_committed_only_after_commit(
    broker_process: BrokerProcess,
) -> None:
    bootstrap = _with_topic_t(broker_process, partitions=2)
    items = [f"v{i}".encode() for i in range(10)]
    producer = _open_transaction(bootstrap, "tx-commit", items)

    assert read_to_end(bootstrap, "t", partitions=2, isolation=READ_COMMITTED) == []
    uncommitted = read_to_end(bootstrap, "t", partitions=2, isolation=READ_UNCOMMITTED)
    assert sorted(values(uncommitted)) == sorted(items)

    producer.commit_transaction(30)
    committed = read_to_end(bootstrap, "t", partitions=2, isolation=READ_COMMITTED)
    assert sorted(values(committed)) == sorted(items)
    # The commit markers take an offset each, but no client ever sees them as records.
    uncommitted = read_to_end(bootstrap, "t", partitions=2, isolation=READ_UNCOMMITTED)
    assert sorted(values(uncommitted)) == sorted(items)
    for partition in (0, 1):
        low, high = _watermarks(bootstrap, "t", partition)
        assert (low, high) == (0, 6)  # 5 records + 1 marker


def _watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        consumer.close()


def test_aborted_data_is_skipped_by_read_committed_and_shown_to_read_uncommitted(
    broker_process: BrokerProcess,
) -> None:
    bootstrap = _with_topic_t(broker_process, partitions=2)
    producer = txn_producer(bootstrap, "tx-abort")
    expected: list[bytes] = []
    everything: list[bytes] = []
    for round_ in range(6):
        producer.begin_transaction()
        items = [f"r{round_}-{i}".encode() for i in range(7)]
        _produce(producer, items)
        everything += items
        if round_ % 2:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            expected += items

    committed = read_to_end(bootstrap, "t", partitions=2, isolation=READ_COMMITTED)
    assert sorted(values(committed)) == sorted(expected)
    # Per partition, the committed records come in produce order.
    for partition in (0, 1):
        mine = [r.value for r in committed if r.partition == partition]
        assert mine == [v for i, v in enumerate(expected) if (i % 7) % 2 == partition]
    uncommitted = read_to_end(bootstrap, "t", partitions=2, isolation=READ_UNCOMMITTED)
    assert sorted(values(uncommitted)) == sorted(everything)


def test_read_committed_never_reads_past_an_open_transaction(
    broker_process: BrokerProcess,
) -> None:
    bootstrap = _with_topic_t(broker_process, partitions=1)
    slow = _open_transaction(bootstrap, "tx-slow", [b"slow-1"], partitions=1)
    fast = _open_transaction(bootstrap, "tx-fast", [b"fast-1"], partitions=1)
    fast.commit_transaction(30)
    # fast-1 is committed but after slow's open transaction began: not yet readable.
    assert read_to_end(bootstrap, "t", partitions=1, isolation=READ_COMMITTED) == []
    slow.abort_transaction(30)
    assert values(read_to_end(bootstrap, "t", partitions=1, isolation=READ_COMMITTED)) == [
        b"fast-1"
    ]


def test_a_new_instance_fences_the_zombie_whose_data_never_becomes_visible(
    broker_process: BrokerProcess,
) -> None:
    bootstrap = _with_topic_t(broker_process, partitions=2)
    zombie = _open_transaction(bootstrap, "tx-shared", [b"zombie-1", b"zombie-2"])
    # The successor's InitProducerId aborts the zombie's transaction.
    successor = _open_transaction(bootstrap, "tx-shared", [b"new-1", b"new-2"])
    successor.commit_transaction(30)

    with pytest.raises(KafkaException) as raised:
        zombie.produce("t", value=b"zombie-3", partition=0)
        zombie.commit_transaction(30)
    error = raised.value.args[0]
    assert error.fatal() or error.txn_requires_abort()
    assert error.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    ), error

    committed = read_to_end(bootstrap, "t", partitions=2, isolation=READ_COMMITTED)
    assert sorted(values(committed)) == [b"new-1", b"new-2"]


def test_an_abandoned_transaction_is_aborted_after_its_timeout(tmp_path) -> None:  # type: ignore[no-untyped-def]
    running = start_broker_process(tmp_path / "data")
    try:
        bootstrap = _with_topic_t(running, partitions=1)
        abandoned = _open_transaction(
            bootstrap,
            "tx-abandoned",
            [b"lost-1", b"lost-2"],
            partitions=1,
            **{"transaction.timeout.ms": 6000},
        )
        other = _open_transaction(bootstrap, "tx-other", [b"kept"], partitions=1)
        other.commit_transaction(30)
        assert read_to_end(bootstrap, "t", partitions=1, isolation=READ_COMMITTED) == []

        deadline = time.monotonic() + 20
        committed: list[bytes | None] = []
        while time.monotonic() < deadline and not committed:
            time.sleep(0.3)
            committed = values(read_to_end(bootstrap, "t", partitions=1, isolation=READ_COMMITTED))
        assert committed == [b"kept"]
        assert "timed out after 6000 ms: aborting" in running.log_text()
        # The abandoned producer was fenced: its transaction cannot be committed any more.
        with pytest.raises(KafkaException):
            abandoned.commit_transaction(10)
    finally:
        running.kill()
