"""Exactly once through crashes: a consume-transform-produce worker killed with -9 again and
again, and a broker killed with -9 in the middle of transactions."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import IO

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from riverbed.testing.topic_reader import READ_COMMITTED, read_to_end
from tests.support.brokers import GROUPS_FAST, create_topic, start_broker_process
from tests.support.transactions import txn_producer, values

pytestmark = pytest.mark.timeout(300)

WORKER = Path(__file__).parent.parent / "support" / "eos_worker.py"
INPUT_RECORDS = 3000


def _start_worker(bootstrap: str, log: IO[str]) -> subprocess.Popen[str]:
    root = Path(__file__).resolve().parents[2]
    return subprocess.Popen(
        [sys.executable, str(WORKER), bootstrap, "input", "output"],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
    )


def _wait_for(worker: subprocess.Popen[str], log: Path, *, commits: int) -> None:
    """Until the worker has committed ``commits`` transactions and opened the next one."""
    assert worker.stdout is not None
    seen = 0
    while True:
        line = worker.stdout.readline()
        assert line.startswith(("open", "committed")), f"worker stopped: {line!r}\n" + (
            log.read_text()
        )
        if line.startswith("committed"):
            seen += 1
        elif seen >= commits:
            return


def _committed_offsets(bootstrap: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos"})
    try:
        wanted = [TopicPartition("input", p) for p in range(partitions)]
        return [tp.offset for tp in consumer.committed(wanted, timeout=10)]
    finally:
        consumer.close()


def test_a_worker_killed_again_and_again_writes_every_output_exactly_once(
    tmp_path: Path,
) -> None:
    running = start_broker_process(tmp_path / "data", extra_args=GROUPS_FAST)
    try:
        bootstrap = running.bootstrap
        create_topic(bootstrap, "input", partitions=3)
        create_topic(bootstrap, "output", partitions=3)
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        for i in range(INPUT_RECORDS):
            producer.produce("input", key=str(i).encode(), value=str(i).encode(), partition=i % 3)
        producer.flush(30)

        rng = random.Random(4)
        kills = 0
        log_path = tmp_path / "worker.log"
        log = log_path.open("a")
        for _ in range(4):  # run a while, then SIGKILL at a random moment
            worker = _start_worker(bootstrap, log)
            try:
                _wait_for(worker, log_path, commits=rng.randint(1, 5))  # then kill it
                time.sleep(rng.uniform(0, 0.02))  # inside its open transaction
            finally:
                worker.kill()
                worker.wait()
                if worker.stdout is not None:
                    worker.stdout.close()
            kills += 1

        worker = _start_worker(bootstrap, log)  # the last one runs until all input is processed
        try:
            deadline = time.monotonic() + 120
            while sum(_committed_offsets(bootstrap, 3)) < INPUT_RECORDS:
                assert worker.poll() is None, "the worker died"
                assert time.monotonic() < deadline, _committed_offsets(bootstrap, 3)
                time.sleep(0.5)
        finally:
            worker.send_signal(signal.SIGKILL)
            worker.wait()
            if worker.stdout is not None:
                worker.stdout.close()

        output = values(read_to_end(bootstrap, "output", partitions=3, isolation=READ_COMMITTED))
        counts = Counter(output)
        assert sorted(counts) == sorted(f"out:{i}".encode() for i in range(INPUT_RECORDS))
        assert max(counts.values()) == 1, [v for v, n in counts.items() if n > 1][:10]
        assert kills == 4
        # Every kill cut a transaction off: its records are in the log, aborted (the next
        # instance's init fenced it), and read_uncommitted readers see them as well.
        everything = read_to_end(bootstrap, "output", partitions=3, isolation="read_uncommitted")
        assert len(everything) >= INPUT_RECORDS + kills
    finally:
        running.kill()
        log.close()


def test_a_transaction_survives_a_broker_kill_and_commits_afterwards(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    running = start_broker_process(data_dir)
    bootstrap = running.bootstrap
    try:
        create_topic(bootstrap, "t", partitions=2)
        producer = txn_producer(bootstrap, "tx-survivor")
        producer.begin_transaction()
        for i in range(10):
            producer.produce("t", value=f"first-{i}".encode(), partition=i % 2)
        producer.commit_transaction(30)
        producer.begin_transaction()
        for i in range(10):
            producer.produce("t", value=f"second-{i}".encode(), partition=i % 2)
        producer.flush(30)  # in the log, not committed

        running.kill()
        running = start_broker_process(data_dir, listen=bootstrap)
        committed = values(read_to_end(bootstrap, "t", partitions=2, isolation=READ_COMMITTED))
        assert sorted(committed) == sorted(f"first-{i}".encode() for i in range(10))

        producer.commit_transaction(60)  # the coordinator still knows the open transaction
        committed = values(read_to_end(bootstrap, "t", partitions=2, isolation=READ_COMMITTED))
        assert sorted(committed) == sorted(
            [f"first-{i}".encode() for i in range(10)] + [f"second-{i}".encode() for i in range(10)]
        )
    finally:
        running.kill()


def test_a_transaction_open_when_the_broker_was_killed_is_aborted_by_its_timeout(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    running = start_broker_process(data_dir)
    bootstrap = running.bootstrap
    try:
        create_topic(bootstrap, "t", partitions=1)
        lost = txn_producer(bootstrap, "tx-lost", **{"transaction.timeout.ms": 3000})
        lost.begin_transaction()
        lost.produce("t", value=b"never", partition=0)
        lost.flush(30)
        running.kill()
        running = start_broker_process(data_dir, listen=bootstrap)

        later = txn_producer(bootstrap, "tx-later")
        later.begin_transaction()
        later.produce("t", value=b"later", partition=0)
        later.commit_transaction(30)
        deadline = time.monotonic() + 30
        committed: list[bytes | None] = []
        while not committed:
            assert time.monotonic() < deadline, "the open transaction was never aborted"
            time.sleep(0.3)
            committed = values(read_to_end(bootstrap, "t", partitions=1, isolation=READ_COMMITTED))
        assert committed == [b"later"]
    finally:
        running.kill()
