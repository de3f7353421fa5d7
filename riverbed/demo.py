"""``make demo``: riverbed end to end on one machine, with what happened and how fast.

Starts a broker in this process (the embedded default) on a free port with its data in
``data/demo`` (kept afterwards, to look at), then with confluent-kafka, the client every
riverbed component uses: creates a topic of 3 partitions, produces a clickstream of JSON
events keyed by user, reads it back, and shows the per-partition offsets, per-key order,
throughput; then two consumers share the topic in a consumer group, and after more events
arrive the demo shows the group's lag; then a consume-transform-produce job copies the
clicks to another topic exactly once with transactions (and aborts a transaction of junk on
purpose); then a Spark Structured Streaming query counts clicks per page through the
riverbed data source and writes the counts back exactly once (:mod:`riverbed.demo_spark`);
then the shop workload runs through the ``page_views_per_minute`` and ``fraud_alerts``
pipelines, window results, late events and fraud alerts shown as they arrive
(:mod:`riverbed.demo_pipelines`); then the shop's PostgreSQL is captured (CDC) into topics
that feed ``enriched_clicks`` and ``category_sales``, checked against the database
(:mod:`riverbed.demo_cdc`); last, the files on disk.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import shutil
import threading
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from riverbed import demo_cdc, demo_pipelines, demo_spark
from riverbed.broker import Broker

TOPIC = "clicks"
GROUP = "click-readers"
EOS_TOPIC = "click-pages"
EOS_GROUP = "click-pages-job"
PARTITIONS = 3
PAGES = ("/home", "/search", "/product/42", "/cart", "/checkout")


def _events(count: int, *, seed: int) -> list[tuple[str, dict[str, object]]]:
    rng = random.Random(seed)
    start_ms = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    events = []
    for i in range(count):
        user = f"u{rng.randrange(50):03d}"
        events.append(
            (
                user,
                {
                    "event_id": f"e{i}",
                    "user_id": user,
                    "page": rng.choice(PAGES),
                    "ts": start_ms + i * 10,
                },
            )
        )
    return events


class GroupReader:
    """One member of a consumer group, reading on its own thread and committing as it goes."""

    def __init__(self, bootstrap: str, name: str) -> None:
        self.name = name
        self.partitions: set[int] = set()
        self.seen: list[tuple[int, int]] = []
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": GROUP,
                "client.id": name,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name)

    def start(self) -> None:
        self._consumer.subscribe([TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self._thread.start()

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.partitions |= {p.partition for p in partitions}

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.partitions -= {p.partition for p in partitions}

    def _run(self) -> None:
        while not self._stop.is_set():
            batch = self._consumer.consume(num_messages=5_000, timeout=0.1)
            records = [m for m in batch if m.error() is None]
            if records:
                self.seen.extend((m.partition(), m.offset()) for m in records)
                self._consumer.commit(asynchronous=False)  # at least once: after processing

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._consumer.close()  # leaves the group


def _share_in_a_group(bootstrap: str, *, total: int, producer: Producer) -> None:
    _section(f"two consumers share {TOPIC!r} in consumer group {GROUP!r}")
    readers = [GroupReader(bootstrap, name) for name in ("reader-1", "reader-2")]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + 60
    while sum(len(r.seen) for r in readers) < total and time.monotonic() < deadline:
        time.sleep(0.05)
    seen = [position for reader in readers for position in reader.seen]
    for reader in readers:
        print(
            f"  {reader.name}: partitions {sorted(reader.partitions)}, "
            f"read {len(reader.seen):,} events"
        )
    print(f"together {len(seen):,} of {total:,} events, each read once: {len(set(seen)) == total}")
    for reader in readers:
        reader.close()

    more = 1_000
    for i in range(more):
        producer.produce(TOPIC, key=f"u{i % 50:03d}", value=json.dumps({"late": i}))
    producer.flush(30)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = [ConsumerGroupTopicPartitions(GROUP)]
    committed = admin.list_consumer_group_offsets(request)[GROUP].result(30)
    watermarks = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo-watermarks"})
    print(f"after {more:,} more events, the group's lag (both readers have left):")
    for position in sorted(committed.topic_partitions, key=lambda tp: tp.partition):
        _, end = watermarks.get_watermark_offsets(position, timeout=10)
        print(
            f"  partition {position.partition}: committed {position.offset:,}, "
            f"log end {end:,}, lag {end - position.offset:,}"
        )
    watermarks.close()


INTERNAL_TOPICS = {
    "__consumer_offsets": "committed offsets",
    "__transaction_state": "transaction coordinator state",
}


def _show_data_dir(data_dir: Path) -> None:
    """The broker's files, with the 50 partitions of each internal topic summed up."""
    internal: dict[str, list[Path]] = {name: [] for name in INTERNAL_TOPICS}
    for path in sorted(data_dir.iterdir()):
        topic = path.name.rsplit("-", 1)[0]
        if path.is_dir() and topic in internal:
            internal[topic].append(path)
        elif path.is_dir():
            names = ", ".join(f"{f.name} ({f.stat().st_size:,} B)" for f in sorted(path.iterdir()))
            print(f"  {path.name}/: {names}")
        else:
            print(f"  {path.name} ({path.stat().st_size:,} B)")
    for topic, directories in internal.items():
        if directories:
            stored = sum(f.stat().st_size for d in directories for f in d.glob("*.log"))
            print(
                f"  {topic}-0..{len(directories) - 1}/: {INTERNAL_TOPICS[topic]}, "
                f"{stored:,} B of record batches in all"
            )


def count_records(
    bootstrap: str, topic: str, *, partitions: int, isolation: str, timeout_s: float = 60
) -> int:
    """Records of ``topic`` a consumer with this isolation level reads from the start to
    the end of each partition (also used by ``benchmarks/txn_throughput.py``)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "demo-count",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen, eof = 0, set()
    deadline = time.monotonic() + timeout_s
    while len(eof) < partitions and time.monotonic() < deadline:
        for message in consumer.consume(num_messages=10_000, timeout=0.2):
            error = message.error()
            if error is None:
                seen += 1
            elif error.code() == KafkaError._PARTITION_EOF:
                eof.add(message.partition())
    consumer.close()
    return seen


def _exactly_once(bootstrap: str, *, total: int) -> None:
    """Consume-transform-produce in transactions: each output and its input offsets are
    committed together, so every click is copied once; one transaction of junk is aborted."""
    _section(f"exactly once: {TOPIC!r} -> {EOS_TOPIC!r}, one transaction per 5,000 clicks")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(EOS_TOPIC, num_partitions=PARTITIONS)])[EOS_TOPIC].result(30)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": EOS_GROUP,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.queue.backoff.ms": 10,
        }
    )
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": EOS_GROUP, "linger.ms": 5}
    )
    producer.init_transactions(30)
    started = time.perf_counter()
    copied, transactions, eof = 0, 0, set()
    while len(eof) < PARTITIONS:
        batch = []
        for message in consumer.consume(num_messages=5_000, timeout=0.2):
            if message.error() is None:
                batch.append(message)
            elif message.error().code() == KafkaError._PARTITION_EOF:
                eof.add(message.partition())
        if not batch:
            continue
        producer.begin_transaction()
        next_offsets: dict[int, int] = {}
        for message in batch:
            page = json.loads(message.value()).get("page", "(late event)")
            producer.produce(EOS_TOPIC, key=message.key(), value=page)
            next_offsets[message.partition()] = message.offset() + 1
        offsets = [TopicPartition(TOPIC, p, o) for p, o in next_offsets.items()]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        copied += len(batch)
        transactions += 1
    producer.begin_transaction()
    for i in range(100):
        producer.produce(EOS_TOPIC, key=b"junk", value=f"junk-{i}")
    producer.flush(30)
    producer.abort_transaction(30)
    elapsed = time.perf_counter() - started
    consumer.close()
    print(
        f"{copied:,} clicks copied in {transactions} transactions in {elapsed:.2f} s, "
        f"then 100 junk records written and aborted"
    )
    committed = count_records(
        bootstrap, EOS_TOPIC, partitions=PARTITIONS, isolation="read_committed"
    )
    everything = count_records(
        bootstrap, EOS_TOPIC, partitions=PARTITIONS, isolation="read_uncommitted"
    )
    print(f"read_committed reader: {committed:,} records (each click once: {committed == total})")
    print(f"read_uncommitted reader: {everything:,} records (the aborted junk too)")


def _section(title: str) -> None:
    print(f"\n== {title}")


def run(data_dir: Path, *, count: int, shop_seconds: float) -> None:
    if data_dir.exists():
        shutil.rmtree(data_dir)
    _section("broker")
    # Both readers of the group section join within the initial rebalance delay, so the
    # group starts with both (Kafka's default delay is 3 s; 1 s keeps the demo brisk).
    config = {"group.initial.rebalance.delay.ms": "1000"}
    with Broker(data_dir, listen="127.0.0.1:0", config=config) as broker:
        bootstrap = broker.bootstrap_servers
        print(f"riverbed broker running in-process on {bootstrap}, data in {data_dir}")

        _section(f"topic {TOPIC!r} with {PARTITIONS} partitions")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS)])[TOPIC].result(30)
        metadata = admin.list_topics(TOPIC, timeout=10)
        print(
            f"cluster {metadata.cluster_id}, partitions {sorted(metadata.topics[TOPIC].partitions)}"
        )

        _section(f"produce {count:,} click events (idempotent, acks=all, lz4)")
        events = _events(count, seed=7)
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "compression.type": "lz4",
                "linger.ms": 5,
            }
        )
        started = time.perf_counter()
        for user, event in events:
            while True:
                try:
                    producer.produce(TOPIC, key=user, value=json.dumps(event))
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.05)
            producer.poll(0)
        if producer.flush(60) != 0:
            raise SystemExit("demo: some events were not delivered")
        produce_s = time.perf_counter() - started
        print(f"{count:,} events acknowledged in {produce_s:.2f} s ({count / produce_s:,.0f}/s)")

        _section("consume them back from the beginning")
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "demo",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                # librdkafka pauses fetching for 1 s whenever its local queue is full;
                # a short pause keeps a Python loop fed (see BENCHMARKS.md).
                "fetch.queue.backoff.ms": 10,
            }
        )
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        started = time.perf_counter()
        per_partition: Counter[int] = Counter()
        last_ts: dict[str, int] = {}
        in_order = True
        eof: set[int] = set()
        first = None
        while len(eof) < PARTITIONS:
            for message in consumer.consume(num_messages=10_000, timeout=0.2):
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise SystemExit(f"demo: {error}")
                    eof.add(message.partition())
                    continue
                event = json.loads(message.value())
                first = first or (message.partition(), message.offset(), event)
                per_partition[message.partition()] += 1
                in_order &= last_ts.get(event["user_id"], -1) < event["ts"]
                last_ts[event["user_id"]] = event["ts"]
        consume_s = time.perf_counter() - started
        consumer.close()
        total = sum(per_partition.values())
        print(f"{total:,} events read in {consume_s:.2f} s ({total / consume_s:,.0f}/s)")
        for partition in range(PARTITIONS):
            print(f"  partition {partition}: offsets 0..{per_partition[partition] - 1}")
        print(f"every user's events in order: {in_order}")
        if first is not None:
            print(f"first record: partition {first[0]} offset {first[1]} -> {first[2]}")

        _share_in_a_group(bootstrap, total=total, producer=producer)
        _exactly_once(bootstrap, total=total + 1_000)

        _section("Spark: clicks per page, a streaming query on the riverbed data source")
        demo_spark.run(bootstrap, topic=TOPIC, partitions=PARTITIONS)

        _section(
            "the shop workload through page_views_per_minute (event-time windows, late data) "
            "and fraud_alerts (CEP)"
        )
        demo_pipelines.run(bootstrap, count=min(4 * count, 30_000))

        _section("the shop's PostgreSQL through CDC: enriched_clicks and category_sales")
        demo_cdc.run(bootstrap, seconds=shop_seconds)
        del producer
        gc.collect()  # close every client before the broker stops (no reconnect noise)

    _section("on disk (Kafka's layout)")
    _show_data_dir(data_dir)

    _section("try it yourself")
    print("  .venv/bin/riverbed broker --data-dir data/broker   # a broker on 127.0.0.1:9092")
    print("  .venv/bin/riverbed topics create --topic clicks --partitions 3")
    print("  echo 'u1:hello' | .venv/bin/riverbed produce --topic clicks --key-separator :")
    print("  .venv/bin/riverbed consume --topic clicks --from-beginning --exit-at-end")
    print("  .venv/bin/riverbed consume --topic clicks --group readers --from-beginning")
    print("  .venv/bin/riverbed groups describe readers")
    print("  .venv/bin/riverbed consume --topic clicks --isolation-level read_committed")
    print("  .venv/bin/riverbed transactions list")


def main() -> None:
    parser = argparse.ArgumentParser(description="riverbed end to end on one machine")
    parser.add_argument("--data-dir", type=Path, default=Path("data/demo"))
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument(
        "--shop-seconds",
        type=float,
        default=40.0,
        help="how long the shop runs in real time in the CDC section",
    )
    args = parser.parse_args()
    run(args.data_dir, count=args.events, shop_seconds=args.shop_seconds)


if __name__ == "__main__":
    main()
