"""Restarts, kill -9 and corrupted segment files, with real clients and a real broker process."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from confluent_kafka import KafkaError, Producer

from tests.support.brokers import create_topic, start_broker_process
from tests.support.topics import partition_offset_values


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0


def test_restart_keeps_data_and_offsets_continue(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = start_broker_process(data_dir)
    try:
        create_topic(first.bootstrap, "kept", partitions=2)
        produce(first.bootstrap, "kept", [b"before-%d" % i for i in range(1000)])
        assert first.stop() == 0, first.log_text()
        second = start_broker_process(data_dir, listen=first.bootstrap)
        try:
            produce(second.bootstrap, "kept", [b"after-%d" % i for i in range(1000)])
            rows = partition_offset_values(second.bootstrap, "kept", 2)
        finally:
            assert second.stop() == 0
    finally:
        first.kill()
    assert sorted(v for _, _, v in rows) == sorted(
        [b"before-%d" % i for i in range(1000)] + [b"after-%d" % i for i in range(1000)]
    )
    for partition in (0, 1):
        offsets = [o for p, o, _ in rows if p == partition]
        assert offsets == list(range(len(offsets))), "dense offsets across the restart"


def test_kill_9_during_idempotent_acks_all_production_loses_and_duplicates_nothing(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    broker = start_broker_process(data_dir)
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "crashy", partitions=3)

    acknowledged: list[bytes] = []
    failed: list[KafkaError] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "message.timeout.ms": 120_000,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 200,
        }
    )

    def on_delivery(err: KafkaError | None, message: object) -> None:
        if err is None:
            acknowledged.append(message.value())  # type: ignore[attr-defined]
        else:
            failed.append(err)

    stop_producing = threading.Event()
    sent = 0

    def run_producer() -> None:
        nonlocal sent
        while not stop_producing.is_set():
            value = b"m%08d" % sent
            try:
                producer.produce(
                    "crashy", key=b"%d" % (sent % 17), value=value, on_delivery=on_delivery
                )
            except BufferError:  # the broker is down and the local queue is full: wait
                producer.poll(0.05)
                continue
            sent += 1
            if sent % 200 == 0:
                producer.poll(0.005)

    thread = threading.Thread(target=run_producer)
    thread.start()
    kills = 0
    try:
        for _ in range(5):
            time.sleep(1.0)
            broker.kill()
            kills += 1
            broker = start_broker_process(data_dir, listen=bootstrap)
        time.sleep(1.0)
    finally:
        stop_producing.set()
        thread.join()
    remaining = producer.flush(120)
    try:
        assert remaining == 0, f"{remaining} messages never delivered"
        assert failed == []
        assert kills == 5
        assert len(acknowledged) == sent > 1000

        stored = [v for _, _, v in partition_offset_values(bootstrap, "crashy", 3)]
        assert len(stored) == len(set(stored)), "no duplicates"
        assert set(acknowledged) <= set(stored), "no acknowledged message lost"
    finally:
        broker.stop()


def _segment_files(data_dir: Path, topic: str, partition: int) -> list[Path]:
    return sorted((data_dir / f"{topic}-{partition}").glob("*.log"))


def test_garbage_appended_to_a_segment_is_truncated_and_writes_continue(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    for clean_stop in (True, False):
        broker = start_broker_process(data_dir)
        produce(
            broker.bootstrap,
            "torn",
            [b"good-%d" % i for i in range(clean_stop * 100, clean_stop * 100 + 100)],
        )
        if clean_stop:
            assert broker.stop() == 0
        else:
            broker.kill()
        segment = _segment_files(data_dir, "torn", 0)[-1]
        with segment.open("ab") as f:
            f.write(b"\x00\x00\x00\x00\x00\x00\x00\x64\x00\x00\x01\x00garbage" * 50)
        broker = start_broker_process(data_dir)
        try:
            produce(broker.bootstrap, "torn", [b"new-%d" % int(clean_stop)])
            rows = partition_offset_values(broker.bootstrap, "torn", 1)
        finally:
            broker.stop()
        offsets = [o for _, o, _ in rows]
        assert offsets == list(range(len(offsets)))
        assert rows[-1][2] == b"new-%d" % int(clean_stop)
    values = {v for _, _, v in rows}
    assert {b"good-%d" % i for i in range(200)} <= values
    assert len(rows) == 202
