"""Transactional produce throughput against idempotent acks=all, with confluent-kafka.

    .venv/bin/python benchmarks/txn_throughput.py [--messages N] [--per-txn N] [--data-dir DIR]

Starts ``riverbed broker`` as its own process and measures, each on a fresh topic of 4
partitions, with the producer settings of ``broker_throughput.py`` (linger.ms=5, 1 MB
batches), 1,000,000 messages of 100 bytes:

1. an idempotent producer (acks=all, as librdkafka forces for idempotence);
2. for each ``--producers`` count, that many transactional producers (one thread and one
   transactional id each) committing every ``--per-txn`` (1,000) messages between them:
   begin, produce, commit; the clock stops after the last commit returns.

Each is run ``--repeat`` times, interleaved, and the medians are compared (the ratio target
is at least 70%); every transactional run is checked with a read_committed consumer that
sees all of its messages. Prints msg/s, the time per transaction and the broker's peak RSS.
Not part of the test run; results go in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import queue
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import (
    MESSAGE_BYTES,
    PARTITIONS,
    PRODUCER_SETTINGS,
    PeakRss,
    machine,
    start_broker,
)
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from riverbed.testing.topic_reader import count_to_end


def create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])[topic].result(timeout=30)


def idempotent(bootstrap: str, topic: str, count: int) -> float:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, **PRODUCER_SETTINGS}
    )
    producer.list_topics(topic, timeout=10)
    payload = b"x" * MESSAGE_BYTES
    start = time.perf_counter()
    produce_one = producer.produce
    for i in range(count):
        produce_one(topic, payload, partition=i % PARTITIONS)
        if i % 100_000 == 0:
            producer.poll(0)
    if producer.flush(300) != 0:
        raise SystemExit("idempotent produce did not finish")
    return time.perf_counter() - start


def transactional(bootstrap: str, topic: str, count: int, per_txn: int, producers: int) -> float:
    """Seconds for ``producers`` transactional producers (one thread each, their own
    transactional ids) to commit ``count`` messages between them in transactions of
    ``per_txn``."""
    clients = []
    for n in range(producers):
        producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": f"bench-{n}", **PRODUCER_SETTINGS}
        )
        producer.init_transactions(30)
        producer.list_topics(topic, timeout=10)
        clients.append(producer)
    payload = b"x" * MESSAGE_BYTES
    transactions = queue.SimpleQueue[tuple[int, int]]()
    for first in range(0, count, per_txn):
        transactions.put((first, min(first + per_txn, count)))
    failures: list[BaseException] = []

    def work(producer: Producer) -> None:
        produce_one = producer.produce
        try:
            while True:
                try:
                    first, end = transactions.get_nowait()
                except queue.Empty:
                    return
                producer.begin_transaction()
                for i in range(first, end):
                    produce_one(topic, payload, partition=i % PARTITIONS)
                producer.commit_transaction(60)  # releases the GIL while it waits
        except BaseException as e:  # reported by the main thread
            failures.append(e)

    threads = [threading.Thread(target=work, args=(p,)) for p in clients]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    if failures:
        raise SystemExit(f"a transaction failed: {failures[0]!r}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--per-txn", type=int, default=1_000)
    parser.add_argument(
        "--producers",
        type=int,
        nargs="+",
        default=[1, 8, 32],
        help="transactional producers working at once (each count is one run)",
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.data_dir) as tmp:
        process, bootstrap = start_broker(Path(tmp) / "data")
        rss = PeakRss(process.pid)
        try:
            idem: list[float] = []
            runs: dict[int, list[float]] = {n: [] for n in args.producers}
            for round_ in range(args.repeat):
                topic = f"idempotent-{round_}"
                create(bootstrap, topic)
                idem.append(args.messages / idempotent(bootstrap, topic, args.messages))
                for producers in args.producers:
                    topic = f"transactional-{producers}-{round_}"
                    create(bootstrap, topic)
                    seconds = transactional(
                        bootstrap, topic, args.messages, args.per_txn, producers
                    )
                    visible = count_to_end(
                        bootstrap,
                        topic,
                        partitions=PARTITIONS,
                        isolation="read_committed",
                        timeout_s=300,
                    )
                    if visible != args.messages:
                        sys.exit(f"read_committed saw {visible} of {args.messages} messages")
                    runs[producers].append(args.messages / seconds)
        finally:
            process.terminate()
            process.wait()
            peak = rss.stop()
    transactions = -(-args.messages // args.per_txn)
    idem_rate = statistics.median(idem)
    print(f"machine: {machine()}")
    print(
        f"messages: {args.messages} x {MESSAGE_BYTES} B over {PARTITIONS} partitions; "
        f"medians of {args.repeat} interleaved runs"
    )
    print(f"idempotent acks=all, 1 producer: {idem_rate:,.0f} msg/s ({_spread(idem)})")
    for producers, rates in runs.items():
        rate = statistics.median(rates)
        per_txn_ms = producers * args.per_txn / rate * 1000  # one producer's view
        print(
            f"transactional, {producers} producer(s), {transactions} txns of {args.per_txn}: "
            f"{rate:,.0f} msg/s ({_spread(rates)}; {per_txn_ms:.1f} ms per transaction per"
            f" producer), {rate / idem_rate:.0%} of idempotent"
        )
    print("a read_committed consumer saw every transactional message of every run")
    print(f"broker peak RSS: {peak / 1024**2:.0f} MiB")


def _spread(rates: list[float]) -> str:
    return "runs " + ", ".join(f"{r / 1000:,.0f}k" for r in rates)


if __name__ == "__main__":
    main()
