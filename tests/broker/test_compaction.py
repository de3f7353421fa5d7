"""Compaction and retention on a running broker, seen through real Kafka clients."""

from __future__ import annotations

import asyncio
import random
import subprocess
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as AIOTopicPartition
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from riverbed.broker import Broker
from riverbed.testing.topic_reader import read_to_end
from tests.support.brokers import BrokerProcess, running_broker, start_broker_process
from tests.support.log_files import table_of
from tests.support.metrics import scrape

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaPythonPartition

FAST_MAINTENANCE = (
    "--set",
    "log.cleaner.backoff.ms=100",
    "--set",
    "log.retention.check.interval.ms=100",
    "--set",
    "log.flush.offset.checkpoint.interval.ms=200",
    "--set",
    "metrics.listen=127.0.0.1:0",
)
Record = tuple[int, bytes | None, bytes | None]


def _create(bootstrap: str, topic: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(
        topic, num_partitions=1, config={k.replace("_", "."): v for k, v in configs.items()}
    )
    admin.create_topics([new])[topic].result(timeout=30)


def _read(bootstrap: str, topic: str) -> list[Record]:
    """(offset, key, value) of every record from the start, read to the end."""
    return [(r.offset, r.key, r.value) for r in read_to_end(bootstrap, topic, partitions=1)]


async def _read_with_aiokafka(bootstrap: str, topic: str, count: int) -> list[Record]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partition = AIOTopicPartition(topic, 0)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        records: list[Record] = []
        while len(records) < count:
            batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
            for messages in batch.values():
                records.extend((m.offset, m.key, m.value) for m in messages)
        return records
    finally:
        await consumer.stop()


def _table(records: list[Record]) -> dict[bytes, bytes]:
    return table_of((key, value) for _, key, value in records)


def _wait_for(what: str, check: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _write_changes(bootstrap: str, topic: str, count: int, *, keys: int, seed: int) -> None:
    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(count):
        key = b"user-%d" % rng.randrange(keys)
        value = None if rng.random() < 0.2 else b"profile-%d" % i
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


@pytest.fixture
def maintained(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker process whose cleaner and retention run every 100 ms."""
    yield from running_broker(tmp_path, *FAST_MAINTENANCE)


def test_a_compacted_topic_converges_to_the_latest_value_of_every_live_key(
    maintained: BrokerProcess,
) -> None:
    topic = "profiles"
    _create(
        maintained.bootstrap,
        topic,
        cleanup_policy="compact",
        segment_bytes="4096",
        segment_ms="1000",
        min_cleanable_dirty_ratio="0.01",
        delete_retention_ms="2000",
    )
    _write_changes(maintained.bootstrap, topic, 5000, keys=200, seed=1)
    expected = _table(_read(maintained.bootstrap, topic))
    assert any(v is None for _, _, v in _read(maintained.bootstrap, topic))
    time.sleep(1.1)  # segment.ms: the next append rolls, so all of it is cleanable
    producer = Producer({"bootstrap.servers": maintained.bootstrap, "acks": "all"})
    producer.produce(topic, key=b"sentinel", value=b"rolls the segment")
    assert producer.flush(30) == 0
    expected[b"sentinel"] = b"rolls the segment"

    def compacted_without_tombstones() -> bool:
        records = _read(maintained.bootstrap, topic)
        return len(records) == len(expected) and all(v is not None for _, _, v in records)

    _wait_for("compaction and tombstone removal", compacted_without_tombstones)
    records = _read(maintained.bootstrap, topic)
    assert _table(records) == expected
    assert len(records) < 5001 / 10  # far fewer records
    metrics = scrape(maintained.metrics_url())
    assert metrics.value("riverbed_log_cleaner_runs_total") >= 1
    reclaimed = metrics.value("riverbed_log_cleaner_reclaimed_bytes_total")
    written = metrics.value("riverbed_topic_bytes_in_total", topic=topic)
    # Most of what was written is gone: 5,001 records down to fewer than 501.
    size = metrics.value("riverbed_log_size_bytes", topic=topic, partition="0")
    assert reclaimed > written / 2  # 5,001 records down to fewer than 501
    # Compaction is all that shrinks this log: what is left is what was written less it.
    assert reclaimed == written - size
    offsets = [offset for offset, _, _ in records]
    assert offsets == sorted(offsets) and offsets[-1] == 5000  # offsets kept, with gaps
    consumer = KafkaConsumer(  # a second client reads the gaps and rewritten batches
        bootstrap_servers=maintained.bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000
    )
    consumer.assign([KafkaPythonPartition(topic, 0)])
    consumer.seek_to_beginning()
    seen = [(m.offset, m.key, m.value) for m in consumer]
    consumer.close()
    assert seen == records
    assert asyncio.run(_read_with_aiokafka(maintained.bootstrap, topic, len(records))) == records
    kcat = subprocess.run(
        ["kcat", "-C", "-b", maintained.bootstrap, "-t", topic, "-e", "-f", "%o %k %s\\n"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert kcat.stdout.splitlines() == [f"{o} {k.decode()} {v.decode()}" for o, k, v in records]


def test_retention_by_bytes_moves_the_start_and_consumers_reset(maintained: BrokerProcess) -> None:
    topic = "clicks"
    _create(maintained.bootstrap, topic, segment_bytes="2048", retention_bytes="8192")
    producer = Producer({"bootstrap.servers": maintained.bootstrap, "batch.num.messages": 20})
    for i in range(600):
        producer.produce(topic, value=b"click-%04d" % i)
        producer.poll(0)
    assert producer.flush(30) == 0
    reader = Consumer(
        {
            "bootstrap.servers": maintained.bootstrap,
            "group.id": "slow",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    reader.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)

    def start_moved() -> bool:
        low, _ = reader.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)
        return low > 3

    _wait_for("retention by bytes", start_moved)
    low, high = reader.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)
    assert high == 600
    records = _read(maintained.bootstrap, topic)
    assert records[0][0] == low and sum(len(v or b"") for _, _, v in records) < 8192 + 2048
    reader.subscribe([topic])  # committed 3 is below the start: reset to earliest
    first = None
    deadline = time.monotonic() + 30
    while first is None:
        assert time.monotonic() < deadline
        message = reader.poll(1)
        if message is not None and not message.error():
            first = message.offset()
    reader.close()
    assert first == low


def test_retention_by_time_uses_record_timestamps(maintained: BrokerProcess) -> None:
    topic = "events"
    _create(maintained.bootstrap, topic, retention_ms="60000", segment_bytes="1024")
    producer = Producer({"bootstrap.servers": maintained.bootstrap, "batch.num.messages": 10})
    now_ms = int(time.time() * 1000)
    for i in range(100):  # an hour old: beyond retention.ms
        producer.produce(topic, value=b"old-%d" % i, timestamp=now_ms - 3_600_000)
    assert producer.flush(30) == 0
    for i in range(20):
        producer.produce(topic, value=b"new-%d" % i, timestamp=now_ms)
    assert producer.flush(30) == 0

    def old_gone() -> bool:
        return all(v.startswith(b"new") for _, _, v in _read(maintained.bootstrap, topic) if v)

    _wait_for("retention by time", old_gone)
    records = _read(maintained.bootstrap, topic)
    assert [v for _, _, v in records][-20:] == [b"new-%d" % i for i in range(20)]


def test_kill_9_while_the_cleaner_runs_loses_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    topic = "accounts"
    broker = start_broker_process(data_dir, extra_args=FAST_MAINTENANCE)
    _create(
        broker.bootstrap,
        topic,
        cleanup_policy="compact",
        segment_bytes="2048",
        min_cleanable_dirty_ratio="0.01",
        delete_retention_ms="500",
    )
    written: list[tuple[bytes, bytes | None]] = []
    rng = random.Random(5)
    kills = 0
    try:
        for round_number in range(6):
            producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
            for i in range(1500):
                key = b"acct-%d" % rng.randrange(60)
                value = None if rng.random() < 0.2 else b"balance-%d-%d" % (round_number, i)
                producer.produce(topic, key=key, value=value)
                written.append((key, value))
            assert producer.flush(30) == 0
            time.sleep(rng.uniform(0.05, 0.6))  # the cleaner is at some step by now
            broker.kill()
            kills += 1
            broker = start_broker_process(data_dir, extra_args=FAST_MAINTENANCE)
            assert _table(_read(broker.bootstrap, topic)) == table_of(written)
        assert "cleaned accounts-0" in _all_logs(tmp_path)
    finally:
        broker.kill()
    assert kills == 6


def _all_logs(tmp_path: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in tmp_path.glob("broker-*.log"))


def test_internal_topics_are_compacted_and_replay_after_a_restart(tmp_path: Path) -> None:
    """__consumer_offsets and __transaction_state are compacted like any compact topic; the
    coordinators still load every group's offsets and every transactional id from them."""
    small = (
        "--set",
        "offsets.topic.num.partitions=1",
        "--set",
        "offsets.topic.segment.bytes=1024",
        "--set",
        "transaction.state.log.num.partitions=1",
        "--set",
        "transaction.state.log.segment.bytes=1024",
        "--set",
        "group.initial.rebalance.delay.ms=0",
    )
    data_dir = tmp_path / "data"
    broker = start_broker_process(data_dir, extra_args=FAST_MAINTENANCE + small)
    try:
        _create(broker.bootstrap, "orders")
        committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "billing"})
        for offset in range(1, 301):
            committer.commit(offsets=[TopicPartition("orders", 0, offset)], asynchronous=False)
        committer.close()
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-1"})
        producer.init_transactions(30)
        for i in range(40):
            producer.begin_transaction()
            producer.produce("orders", key=b"k", value=b"order-%d" % i)
            if i % 4 == 3:
                producer.abort_transaction(30)
            else:
                producer.commit_transaction(30)
        _wait_for(
            "both internal topics cleaned",
            lambda: (
                "cleaned __consumer_offsets-0" in _all_logs(tmp_path)
                and "cleaned __transaction_state-0" in _all_logs(tmp_path)
            ),
        )
        broker.kill()
        broker = start_broker_process(data_dir, extra_args=FAST_MAINTENANCE + small)
        reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "billing"})
        committed = reader.committed([TopicPartition("orders", 0)], timeout=30)
        reader.close()
        assert committed[0].offset == 300
        again = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-1"})
        again.init_transactions(30)  # the id's state was replayed: a new epoch, no error
        again.begin_transaction()
        again.produce("orders", key=b"k", value=b"after-restart")
        again.commit_transaction(30)
        committed = read_to_end(broker.bootstrap, "orders", partitions=1)
        values = [record.value for record in committed]
        assert values == [b"order-%d" % i for i in range(40) if i % 4 != 3] + [b"after-restart"]
    finally:
        broker.kill()


def test_a_compacted_topic_refuses_records_without_a_key(broker: Broker) -> None:
    _create(broker.bootstrap_servers, "keyed", cleanup_policy="compact")
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "retries": 0})
    producer.produce("keyed", value=b"no key", on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(30) == 0
    assert len(errors) == 1 and errors[0].code() == KafkaError.INVALID_RECORD
    producer.produce("keyed", key=b"k", value=b"keyed")
    assert producer.flush(30) == 0
    assert [(k, v) for _, k, v in _read(broker.bootstrap_servers, "keyed")] == [(b"k", b"keyed")]
