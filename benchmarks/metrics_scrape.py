"""What scraping the broker's ``GET /metrics`` costs its throughput.

    .venv/bin/python benchmarks/metrics_scrape.py [--seconds 60] [--rounds 3]
        [--topics 100] [--groups 100] [--interval-s 15]

Starts ``riverbed broker`` as its own process (metrics on a free port), gives it ``--topics``
topics of 4 partitions and ``--groups`` consumer groups with a committed offset on each
partition of one of them (so a scrape carries about ``4 * topics`` partitions' gauges and
``4 * groups`` lag series), then, ``--rounds`` times, produces messages of 100 bytes for
``--seconds`` (acks=1, the producer settings of ``broker_throughput.py``) with and without a
scraper that GETs ``/metrics`` every ``--interval-s`` seconds (Prometheus' default is 60 s,
its examples use 15 s), alternating which goes first; each run's topic is deleted after it.
Reported: msg/s of each run (messages acknowledged over the time to the last
acknowledgement), the medians and their difference, and the scrapes' size and duration.
Not part of the test run; results go in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from _common import MESSAGE_BYTES, PARTITIONS, PRODUCER_SETTINGS, machine, start_broker
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


class Scraper:
    """GETs ``url`` every ``interval_s`` on a thread, keeping each scrape's size and time."""

    def __init__(self, url: str, interval_s: float) -> None:
        self.url, self.interval_s = url, interval_s
        self.seconds: list[float] = []
        self.sizes: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            started = time.perf_counter()
            with urllib.request.urlopen(self.url, timeout=30) as response:
                self.sizes.append(len(response.read()))
            self.seconds.append(time.perf_counter() - started)


def produce_for(bootstrap: str, topic: str, seconds: float) -> float:
    """Messages/s of producing to ``topic`` for ``seconds``, to the last acknowledgement."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", **PRODUCER_SETTINGS})
    payload = b"x" * MESSAGE_BYTES
    failures = 0

    def on_delivery(err: KafkaError | None, _message: object) -> None:
        nonlocal failures
        failures += err is not None

    producer.list_topics(topic, timeout=10)
    start = time.perf_counter()
    sent = 0
    while time.perf_counter() - start < seconds:
        for _ in range(10_000):
            try:
                producer.produce(
                    topic, payload, partition=sent % PARTITIONS, on_delivery=on_delivery
                )
            except BufferError:  # the local queue is full: let the broker catch up
                producer.poll(0.01)
                continue
            sent += 1
        producer.poll(0)
    if producer.flush(300) != 0 or failures:
        raise SystemExit(f"{failures} deliveries failed")
    return sent / (time.perf_counter() - start)


def populate(bootstrap: str, topics: int, groups: int) -> None:
    """``topics`` topics of PARTITIONS partitions, ``groups`` groups committed on the first."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"topic-{i:04d}" for i in range(topics)]
    created = admin.create_topics([NewTopic(name, num_partitions=PARTITIONS) for name in names])
    for future in created.values():
        future.result(timeout=60)
    for i in range(groups):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"group-{i:04d}"})
        consumer.commit(
            offsets=[TopicPartition(names[0], p, 0) for p in range(PARTITIONS)],
            asynchronous=False,
        )
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="each run's produce time")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--interval-s", type=float, default=15.0)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    print(
        f"{args.seconds:g} s of messages of {MESSAGE_BYTES} B over {PARTITIONS} partitions, acks=1;"
        f" {args.topics} topics, {args.groups} groups; a scrape every {args.interval_s:g} s",
        flush=True,
    )
    rates: dict[bool, list[float]] = {False: [], True: []}
    seconds: list[float] = []
    sizes: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        process, bootstrap = start_broker(
            Path(tmp) / "data", extra_args=("--set", "metrics.listen=127.0.0.1:0")
        )
        try:
            assert process.stdout is not None
            url = process.stdout.readline().decode().split()[-1]
            populate(bootstrap, args.topics, args.groups)
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for round_ in range(args.rounds):
                order = (False, True) if round_ % 2 == 0 else (True, False)
                for scraped in order:
                    topic = f"bench-{round_}-{'scraped' if scraped else 'quiet'}"
                    future = admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])
                    future[topic].result(timeout=60)
                    if scraped:
                        with Scraper(url, args.interval_s) as scraper:
                            rate = produce_for(bootstrap, topic, args.seconds)
                        seconds += scraper.seconds
                        sizes += scraper.sizes
                        extra = f", {len(scraper.seconds)} scrapes"
                    else:
                        rate = produce_for(bootstrap, topic, args.seconds)
                        extra = ""
                    admin.delete_topics([topic])[topic].result(timeout=60)
                    rates[scraped].append(rate)
                    print(f"round {round_ + 1}, {'scraped' if scraped else 'not scraped'}:"
                          f" {rate:,.0f} msg/s{extra}", flush=True)  # fmt: skip
        finally:
            process.terminate()
            process.wait(30)
    quiet, scraped = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"median: not scraped {quiet:,.0f} msg/s, scraped {scraped:,.0f} msg/s"
          f" ({(scraped - quiet) / quiet * 100:+.1f}%)")  # fmt: skip
    if seconds:
        ms = sorted(s * 1000 for s in seconds)
        print(f"scrapes: {len(ms)}, {statistics.median(sizes) / 1024:.0f} KiB each,"
              f" median {statistics.median(ms):.1f} ms, max {ms[-1]:.1f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
