"""Log cleaner throughput, and what cleaning costs producers, with confluent-kafka.

    .venv/bin/python benchmarks/cleaner.py [--records N] [--keys N] [--repeat N] [--data-dir DIR]

1. **Cleaner throughput**, in this process (what the broker's cleaner child runs): a
   compacted log of ``--records`` (2,000,000) records with 100-byte values over ``--keys``
   (10,000) keys, in batches of 500 as a producer sends them, 16 MiB segments; one
   cleaning from scratch. Prints records/s and MB/s read, and how much was kept.
2. **Produce throughput while the cleaner runs**: a broker process with a dirty compacted
   topic (the same records, produced), restarted with the cleaner off, then restarted with
   it on. Each time
   1,000,000 messages of 100 bytes go to another topic of 4 partitions (acks=all, the
   settings of ``broker_throughput.py``); with the cleaner on, the benchmark waits for the
   cleaner's child process to start, measures, and checks that the cleaning was still
   running when the last message was acknowledged. ``--repeat`` times, medians compared
   (target: the drop is under 30%).

Not part of the test run; results go in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil
from _common import MESSAGE_BYTES, PARTITIONS, machine, produce, start_broker
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from riverbed.log import (
    CleanerSettings,
    Log,
    SimpleRecord,
    TopicConfig,
    build_batch,
    clean,
    plan_cleaning,
)

SEGMENT_BYTES = 16 * 1024 * 1024
BATCH_RECORDS = 500
TABLE = "table"
LOAD = "load"


def cleaner_throughput(directory: Path, *, records: int, keys: int) -> None:
    config = TopicConfig(
        segment_bytes=SEGMENT_BYTES, cleanup_policy="compact", min_cleanable_dirty_ratio=0.01
    )
    log = Log.open(directory, config=config, clock=lambda: int(time.time() * 1000))
    rng = random.Random(1)
    value = b"v" * MESSAGE_BYTES
    now_ms = int(time.time() * 1000)
    for start in range(0, records, BATCH_RECORDS):
        batch = [
            SimpleRecord(key=b"key-%06d" % rng.randrange(keys), value=value, timestamp_ms=now_ms)
            for _ in range(min(BATCH_RECORDS, records - start))
        ]
        log.append(build_batch(batch))
    log.roll()
    log.flush()
    job = plan_cleaning(log, now_ms=now_ms, settings=CleanerSettings())
    assert job is not None
    started = time.perf_counter()
    result = clean(job)
    seconds = time.perf_counter() - started
    stats = result.stats
    log_mb = sum(s.size for s in job.segments) / 1e6
    print(
        f"cleaner: a log of {stats.records_read:,} records, {log_mb:.0f} MB, cleaned in "
        f"{seconds:.2f} s = {stats.records_read / seconds:,.0f} records/s, "
        f"{log_mb / seconds:.1f} MB/s of log ({stats.bytes_read / 1e6:.0f} MB read in its two "
        f"passes); kept {stats.records_kept:,} records, {stats.bytes_written / 1e6:.1f} MB",
        flush=True,
    )
    log.close()


def fill_table(bootstrap: str, *, records: int, keys: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = {
        "cleanup.policy": "compact",
        "segment.bytes": str(SEGMENT_BYTES),
        "min.cleanable.dirty.ratio": "0.01",
    }
    for topic, partitions, config in ((TABLE, 1, configs), (LOAD, PARTITIONS, {})):
        new = NewTopic(topic, num_partitions=partitions, config=config)
        admin.create_topics([new])[topic].result(timeout=30)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.num.messages": BATCH_RECORDS,
            "queue.buffering.max.messages": 2_000_000,
        }
    )
    rng = random.Random(2)
    value = b"v" * MESSAGE_BYTES
    for i in range(records):
        producer.produce(TABLE, key=b"key-%06d" % rng.randrange(keys), value=value)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    # an empty active segment: all of it is cleanable at once
    time.sleep(1.1)
    producer.produce(TABLE, key=b"roll", value=b"x")
    assert producer.flush(30) == 0


def cleaner_child(broker_pid: int) -> psutil.Process | None:
    for child in psutil.Process(broker_pid).children():
        if "riverbed.log.cleaner_process" in " ".join(child.cmdline()):
            return child
    return None


def one_round(data_root: Path, *, records: int, keys: int, messages: int) -> tuple[float, float]:
    data_dir = data_root / "data"
    no_cleaner = ("--set", "log.cleaner.enable=false")
    process, bootstrap = start_broker(data_dir, extra_args=no_cleaner)
    try:
        fill_table(bootstrap, records=records, keys=keys)
    finally:
        process.terminate()
        process.wait(60)
    # Both measurements on a freshly restarted broker: only the cleaner differs.
    process, bootstrap = start_broker(data_dir, extra_args=no_cleaner)
    try:
        baseline = messages / produce(bootstrap, LOAD, messages, acks="all")
    finally:
        process.terminate()
        process.wait(60)
    process, bootstrap = start_broker(data_dir, extra_args=("--set", "log.cleaner.backoff.ms=50"))
    try:
        deadline = time.monotonic() + 30
        while cleaner_child(process.pid) is None:
            if time.monotonic() > deadline:
                raise SystemExit("the cleaner did not start")
            time.sleep(0.01)
        seconds = produce(bootstrap, LOAD, messages, acks="all")
        if cleaner_child(process.pid) is None:
            raise SystemExit(
                f"the cleaning ended before the measurement ({seconds:.1f} s, baseline "
                f"{baseline:,.0f} msg/s): use more --records"
            )
        during = messages / seconds
        while cleaner_child(process.pid) is not None:
            time.sleep(0.1)
    finally:
        process.terminate()
        process.wait(60)
    return baseline, during


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    print(
        f"{args.records:,} records of {MESSAGE_BYTES} B over {args.keys:,} keys, "
        f"batches of {BATCH_RECORDS}, {SEGMENT_BYTES // 2**20} MiB segments",
        flush=True,
    )
    with tempfile.TemporaryDirectory(dir=args.data_dir) as tmp:
        cleaner_throughput(Path(tmp) / "log", records=args.records, keys=args.keys)
    if args.repeat == 0:
        return
    baselines, durings = [], []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(dir=args.data_dir) as tmp:
            baseline, during = one_round(
                Path(tmp), records=args.records, keys=args.keys, messages=args.messages
            )
        baselines.append(baseline)
        durings.append(during)
        print(
            f"produce acks=all: {baseline:,.0f} msg/s without the cleaner, "
            f"{during:,.0f} msg/s while it cleans ({1 - during / baseline:.0%} less)",
            flush=True,
        )
    base, during = statistics.median(baselines), statistics.median(durings)
    print(
        f"medians: {base:,.0f} vs {during:,.0f} msg/s: {1 - during / base:.0%} less (target < 30%)"
    )


if __name__ == "__main__":
    sys.exit(main())
