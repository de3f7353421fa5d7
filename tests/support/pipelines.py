"""What the pipeline tests share: an independent event generator, the pipeline as a child
process, reading an output topic (read_committed), and plain-Python references."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

MINUTE = 60_000
BASE = 1_767_225_600_000  # 2026-01-01T00:00:00Z
PAGES = ["/home", "/search", "/cart", "/product/1", "/product/2"]


def page_views(
    seed: int, *, users: int, start: int, hours: float, prefix: str
) -> list[dict[str, Any]]:
    """Page views in event-time order: each user browses in bursts (a few views a minute
    apart) separated by 20-90 minutes, so some gaps are below and some above 30 minutes."""
    rng = random.Random(seed)
    events = []
    end = start + int(hours * 60 * MINUTE)
    for u in range(users):
        t = start + rng.randrange(0, 20 * MINUTE)
        while t < end:
            for _ in range(rng.randint(1, 6)):
                events.append({"user_id": f"u{u}", "page": rng.choice(PAGES), "ts": t})
                t += rng.randrange(1_000, 3 * MINUTE)
            t += rng.choice([20, 29, 30, 31, 45, 90]) * MINUTE + rng.randrange(
                0, 2
            ) * rng.randrange(0, MINUTE)
    events.sort(key=lambda e: e["ts"])
    for i, event in enumerate(events):
        event["event_id"] = f"{prefix}{i}"
    return [
        {"event_id": e["event_id"], "user_id": e["user_id"], "page": e["page"], "ts": e["ts"]}
        for e in events
    ]


def disordered(events: list[dict[str, Any]], seed: int, max_ms: int) -> list[dict[str, Any]]:
    """Arrival order: each event delayed by up to ``max_ms`` (bounded disorder)."""
    rng = random.Random(seed)
    return sorted(events, key=lambda e: e["ts"] + rng.randrange(0, max_ms))


def produce(
    bootstrap: str, topic: str, events: list[dict[str, Any]], key_field: str = "user_id"
) -> None:
    """Produce JSON events, keyed ``{key_field: ...}`` (the topic's key in DESIGN.md)."""
    produce_records(
        bootstrap,
        topic,
        [(json.dumps({key_field: e[key_field]}).encode(), json.dumps(e).encode()) for e in events],
    )


def produce_records(
    bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]]
) -> None:
    """Produce (key, value) records as they are, in order (a None value is a tombstone)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    for key, value in records:
        producer.produce(topic, value, key=key)
    assert producer.flush(30) == 0


@dataclass
class Record:
    key: dict[str, Any]
    value: dict[str, Any] | None


def read_committed(bootstrap: str, topic: str) -> list[Record]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    records: list[Record] = []
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return records
        partitions = list(metadata.partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        eof: set[int] = set()
        deadline = time.monotonic() + 30
        while len(eof) < len(partitions) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(message.partition())
                    continue
                raise AssertionError(message.error())
            value = message.value()
            records.append(
                Record(json.loads(message.key()), None if value is None else json.loads(value))
            )
    finally:
        consumer.close()
    return records


def changelog(records: list[Record]) -> dict[str, dict[str, Any]]:
    """The last value per key."""
    table: dict[str, dict[str, Any]] = {}
    for record in records:
        key = json.dumps(record.key, sort_keys=True)
        if record.value is None:
            table.pop(key, None)
        else:
            table[key] = record.value
    return table


def minute_counts(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The reference of page_views_per_minute."""
    counts = Counter((e["ts"] - e["ts"] % MINUTE, e["page"]) for e in events)
    return {
        json.dumps({"window_start": start, "page": page}, sort_keys=True): {
            "window_start": start,
            "window_end": start + MINUTE,
            "page": page,
            "views": n,
        }
        for (start, page), n in counts.items()
    }


def user_sessions(
    events: list[dict[str, Any]], gap: int = 30 * MINUTE
) -> dict[str, dict[str, Any]]:
    """The reference of user_sessions."""
    by_user: dict[str, list[int]] = {}
    for e in events:
        by_user.setdefault(e["user_id"], []).append(e["ts"])
    result = {}
    for user, times in by_user.items():
        times.sort()
        start = previous = times[0]
        count = 0
        for t in times:
            if t - previous >= gap:
                result[json.dumps({"user_id": user, "session_start": start}, sort_keys=True)] = {
                    "user_id": user,
                    "session_start": start,
                    "session_end": previous,
                    "page_views": count,
                }
                start, count = t, 0
            previous, count = t, count + 1
        result[json.dumps({"user_id": user, "session_start": start}, sort_keys=True)] = {
            "user_id": user,
            "session_start": start,
            "session_end": previous,
            "page_views": count,
        }
    return result


@dataclass
class PipelineProcess:
    process: subprocess.Popen[bytes]
    log_path: Path

    @classmethod
    def start(cls, tmp_path: Path, name: str, bootstrap: str, checkpoint: Path) -> PipelineProcess:
        log_path = tmp_path / f"{name}-{time.monotonic_ns()}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "riverbed.cli.main",
                    "pipeline",
                    "run",
                    name,
                    "--bootstrap",
                    bootstrap,
                    "--checkpoint",
                    str(checkpoint),
                    "--trigger-ms",
                    "300",
                    "--master",
                    "local[2]",
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        return cls(process, log_path)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def batches(self) -> list[tuple[int, int, int]]:
        """(batch id, rows, input lag) of each progress line so far."""
        return [
            (int(b), int(r), int(lag))
            for b, r, lag in re.findall(
                r"batch (\d+): (\d+) rows, .*? input lag (\d+) records", self.log()
            )
        ]

    def wait_caught_up(self, after_batch: int = -1, timeout_s: float = 180) -> int:
        """Wait for a batch after ``after_batch`` that read rows and left no input lag,
        then one more batch (so its watermark is in force); returns that batch's id."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"pipeline exited {self.process.returncode}:\n{self.log()}")
            done = [
                b for b, rows, lag in self.batches() if b > after_batch and rows > 0 and lag == 0
            ]
            if done:
                return done[0]
            time.sleep(0.2)
        raise AssertionError(f"pipeline did not catch up:\n{self.log()[-3000:]}")

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=120)

    def kill(self) -> None:
        children = psutil.Process(self.process.pid).children(recursive=True)
        self.process.kill()
        self.process.wait(timeout=30)
        psutil.wait_procs(children, timeout=60)  # Spark's JVM exits when its parent dies
