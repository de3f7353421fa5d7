"""Consumer groups: offset commit latency and the time a 2-member rebalance takes.

    .venv/bin/python benchmarks/group_benchmark.py [--commits N] [--rebalances N]

Starts ``riverbed broker`` as its own process on a free port (Kafka's default
``group.initial.rebalance.delay.ms`` of 3 s applies only to the first join of an empty
group, so it does not enter the rebalance figure), then with confluent-kafka:

1. commit latency: a group member commits its position synchronously N times (each commit
   is appended to ``__consumer_offsets`` and fsynced before it is acknowledged); prints
   p50/p99/max in milliseconds;
2. rebalance time: member A owns a 6-partition topic; member B subscribes; the clock runs
   from B's subscribe until both members hold their new assignment (on_assign fired for
   both, 3 + 3 partitions). A learns about the rebalance at its next heartbeat, so the
   clients' own delay is their ``heartbeat.interval.ms``, set here to 100 ms; the figure is
   reported next to it.

Not part of the test run; results go in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine, percentile, start_broker

HEARTBEAT_INTERVAL_MS = 100
PARTITIONS = 6


def commit_latency(bootstrap: str, commits: int) -> list[float]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-commits",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition("bench-groups", p, 0) for p in range(PARTITIONS)])
    latencies = []
    for i in range(commits):
        offsets = [TopicPartition("bench-groups", i % PARTITIONS, i + 1)]
        start = time.perf_counter()
        consumer.commit(offsets=offsets, asynchronous=False)
        latencies.append((time.perf_counter() - start) * 1000)
    consumer.close()
    return sorted(latencies)


class Member:
    """A group member polling on its own thread, recording when it got an assignment."""

    def __init__(self, bootstrap: str, group: str, name: str) -> None:
        self.assigned_at: list[tuple[float, int]] = []
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": name,
                "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
                "session.timeout.ms": 6000,
                "enable.auto.commit": False,
            }
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def start(self) -> float:
        started = time.perf_counter()
        self._consumer.subscribe(["bench-groups"], on_assign=self._on_assign)
        self._thread.start()
        return started

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assigned_at.append((time.perf_counter(), len(partitions)))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._consumer.poll(0.01)

    def wait_for(self, count: int, *, partitions: int, timeout_s: float = 30) -> float:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for at, size in self.assigned_at[count - 1 :]:
                if size == partitions:
                    return at
            time.sleep(0.001)
        raise SystemExit(f"no assignment of {partitions} partitions within {timeout_s} s")

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._consumer.close()


def rebalance_time(bootstrap: str, group: str) -> float:
    first = Member(bootstrap, group, "a")
    first.start()
    first.wait_for(1, partitions=PARTITIONS)
    second = Member(bootstrap, group, "b")
    started = second.start()
    both = max(
        first.wait_for(2, partitions=PARTITIONS // 2),
        second.wait_for(1, partitions=PARTITIONS // 2),
    )
    first.close()
    second.close()
    return (both - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=2000)
    parser.add_argument("--rebalances", type=int, default=5)
    args = parser.parse_args()
    print(f"machine: {machine()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        process, bootstrap = start_broker(Path(tmp) / "data")
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic("bench-groups", num_partitions=PARTITIONS)])[
                "bench-groups"
            ].result()
            producer = Producer({"bootstrap.servers": bootstrap})
            for i in range(PARTITIONS * 10):
                producer.produce("bench-groups", b"x", partition=i % PARTITIONS)
            producer.flush()

            latencies = commit_latency(bootstrap, args.commits)
            print(
                f"offset commit ({args.commits} synchronous commits): "
                f"p50 {percentile(latencies, 0.50):.2f} ms, p99 {percentile(latencies, 0.99):.2f}"
                f" ms, max {latencies[-1]:.2f} ms",
                flush=True,
            )
            times = [
                rebalance_time(bootstrap, f"bench-rebalance-{i}") for i in range(args.rebalances)
            ]
            print(
                f"2-member rebalance, heartbeat.interval.ms={HEARTBEAT_INTERVAL_MS} "
                f"({args.rebalances} runs): median {statistics.median(times):.0f} ms, "
                f"max {max(times):.0f} ms; each: {', '.join(f'{t:.0f}' for t in times)} ms",
                flush=True,
            )
        finally:
            process.terminate()
            process.wait(30)


if __name__ == "__main__":
    main()
