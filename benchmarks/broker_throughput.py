"""Broker throughput: 1,000,000 messages of 100 bytes over 4 partitions with confluent-kafka.

    .venv/bin/python benchmarks/broker_throughput.py [--messages N] [--data-dir DIR]

Starts ``riverbed broker`` as its own process on a free port, then measures, each with a
fresh topic of 4 partitions and a producer with linger.ms=5 and 1 MB batches:

1. the client's own ceiling: the same produce loop with no broker (messages only queued);
2. produce with acks=1, until every message is acknowledged;
3. produce with acks=all (acknowledged after fsync);
4. consume all messages of (2) from the beginning with one consumer, with librdkafka's
   default queue settings and with the fetcher kept busy (see CONSUMER_TUNING).

It prints msg/s and MB/s for each, the broker's peak RSS, and the machine it ran on.
Not part of the test run; results go in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _common import (
    MESSAGE_BYTES,
    PARTITIONS,
    PRODUCER_SETTINGS,
    CpuClock,
    PeakRss,
    machine,
    produce,
    start_broker,
)
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def client_ceiling(count: int) -> float:
    """Seconds for the same produce loop when no broker is there (messages are only queued)."""
    producer = Producer(
        {"bootstrap.servers": "127.0.0.1:1", "acks": "1", **PRODUCER_SETTINGS, "log_level": 0}
    )
    payload = b"x" * MESSAGE_BYTES

    def on_delivery(_err: KafkaError | None, _message: object) -> None:
        pass

    start = time.perf_counter()
    produce_one = producer.produce
    for i in range(count):
        produce_one("ceiling", payload, partition=i % PARTITIONS, on_delivery=on_delivery)
        if i % 100_000 == 0:
            producer.poll(0)
    elapsed = time.perf_counter() - start
    producer.purge()
    return elapsed


# librdkafka stops fetching for fetch.queue.backoff.ms (default 1000 ms) whenever its local
# queue holds queued.min.messages (default 100,000): a Python loop that drains the queue in
# a few milliseconds then idles for the rest of the second. These two settings keep the
# fetcher busy; the defaults are measured too, to show the difference.
CONSUMER_TUNING = {
    "fetch.queue.backoff.ms": 10,
    "queued.min.messages": 1_000_000,
    "queued.max.messages.kbytes": 1_000_000,
}


# Consumer.consume() returns when it has num_messages or when the timeout passes, whichever
# is first: small batches keep the Python loop in step with librdkafka's fetcher. Measured
# here: 2,000 -> 1.6-1.9M msg/s, 10,000 -> 1.4-1.6M, 30,000 -> 0.09M.
CONSUME_BATCH = 2_000


def consume(bootstrap: str, topic: str, count: int, *, tuned: bool) -> float:
    settings = {"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False}
    consumer = Consumer({**settings, **(CONSUMER_TUNING if tuned else {})})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    received = 0
    start = time.perf_counter()
    while received < count:
        for message in consumer.consume(num_messages=CONSUME_BATCH, timeout=10):
            if message.error() is None:
                received += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def report(name: str, count: int, seconds: float, *, broker_cpu_s: float | None = None) -> None:
    rate = count / seconds
    cpu = "" if broker_cpu_s is None else f", broker CPU {broker_cpu_s / seconds:.0%} of a core"
    print(
        f"{name:<30} {rate:>10,.0f} msg/s {rate * MESSAGE_BYTES / 1e6:>6.1f} MB/s"
        f"  ({seconds:.2f} s{cpu})",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where the broker keeps its logs (default: a temporary directory)",
    )
    args = parser.parse_args()
    count = args.messages
    print(f"machine: {machine()}")
    print(
        f"{count:,} messages of {MESSAGE_BYTES} B over {PARTITIONS} partitions, "
        f"linger.ms=5, batch.size=1 MB",
        flush=True,
    )

    report("client ceiling (no broker)", count, client_ceiling(count))
    with tempfile.TemporaryDirectory(dir=args.data_dir) as tmp:
        process, bootstrap = start_broker(Path(tmp) / "data")
        rss = PeakRss(process.pid)
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for topic in ("bench-acks1", "bench-acksall"):
                admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])[topic].result()
            phases = [
                ("produce acks=1", lambda: produce(bootstrap, "bench-acks1", count, acks="1")),
                (
                    "produce acks=all",
                    lambda: produce(bootstrap, "bench-acksall", count, acks="all"),
                ),
                (
                    "consume (librdkafka defaults)",
                    lambda: consume(bootstrap, "bench-acks1", count, tuned=False),
                ),
                ("consume", lambda: consume(bootstrap, "bench-acks1", count, tuned=True)),
            ]
            cpu = CpuClock(process.pid)
            for name, phase in phases:
                cpu.lap()
                seconds = phase()
                report(name, count, seconds, broker_cpu_s=cpu.lap())
        finally:
            peak = rss.stop()
            process.terminate()
            process.wait(30)
    print(f"broker peak RSS: {peak / 1024**2:.0f} MiB")


if __name__ == "__main__":
    main()
