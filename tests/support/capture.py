"""What the capture tests share: a database per test, ``riverbed cdc run`` as a child
process, reading a CDC topic back, and folding it into the table it describes; the text
values the parsers' property tests draw."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2
from confluent_kafka import Consumer, KafkaError, TopicPartition
from hypothesis import strategies as st

from riverbed.testing.postgres import PostgresCluster


def text_values(*more: st.SearchStrategy[str]) -> st.SearchStrategy[list[str | None]]:
    """1 to 6 values a text column holds: NULL or any text (no NUL, which PostgreSQL refuses,
    and no lone surrogate, which UTF-8 cannot encode), or one of ``more``."""
    text = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]))
    return st.lists(st.one_of(st.none(), text, *more), min_size=1, max_size=6)


@contextmanager
def database(postgres: PostgresCluster) -> Iterator[str]:
    """A new database for one test (its DSN); its slots and itself are dropped after."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = psycopg2.connect(postgres.dsn)
    admin.autocommit = True
    admin.cursor().execute(f"CREATE DATABASE {name}")
    try:
        yield postgres.dsn.rsplit("/", 1)[0] + f"/{name}"
    finally:
        cursor = admin.cursor()
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,)
        )
        for _ in range(50):
            cursor.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE database = %s AND NOT active",
                (name,),
            )
            cursor.execute("SELECT count(*) FROM pg_replication_slots WHERE database = %s", (name,))
            if cursor.fetchone()[0] == 0:
                break
            time.sleep(0.1)
        cursor.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


def sql(dsn: str) -> Any:
    connection = psycopg2.connect(dsn)
    connection.autocommit = True
    return connection


@dataclass
class Capture:
    """``riverbed cdc run`` as a child process; its stderr in ``log_path``."""

    process: subprocess.Popen[bytes]
    log_path: Path

    @classmethod
    def start(cls, tmp_path: Path, *args: str) -> Capture:
        log_path = tmp_path / f"cdc-{time.monotonic_ns()}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "riverbed.cli.main", "cdc", "run", *args],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        return cls(process, log_path)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not re.search(pattern, self.log()):
            if self.process.poll() is not None:
                raise AssertionError(f"capture exited {self.process.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} within {timeout_s} s:\n{self.log()}")
            time.sleep(0.05)

    def stop(self, timeout_s: float = 60) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout_s)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)


def run_capture(
    tmp_path: Path, *args: str, timeout_s: float = 60
) -> subprocess.CompletedProcess[str]:
    """``riverbed cdc ...`` to completion (for commands that fail or end by themselves)."""
    return subprocess.run(
        [sys.executable, "-m", "riverbed.cli.main", "cdc", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=tmp_path,
    )


@dataclass(frozen=True)
class Change:
    key: dict[str, Any]
    value: dict[str, Any] | None  # None: a tombstone
    headers: dict[str, bytes]

    @property
    def op(self) -> str | None:
        return None if self.value is None else self.value["op"]


def read_topic(bootstrap: str, topic: str, timeout_s: float = 30) -> list[Change]:
    """Every record of partition 0 of ``topic``, up to its current end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout_s)
        changes: list[Change] = []
        if high == 0:
            return changes
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    return changes
                raise AssertionError(message.error())
            value = message.value()
            changes.append(
                Change(
                    json.loads(message.key()),
                    None if value is None else json.loads(value),
                    dict(message.headers() or ()),
                )
            )
        raise AssertionError(f"reading {topic} timed out")
    finally:
        consumer.close()


def wait_for_changes(bootstrap: str, topic: str, done: Any, timeout_s: float = 60) -> list[Change]:
    """Read ``topic`` until ``done(changes)`` is true."""
    deadline = time.monotonic() + timeout_s
    while True:
        changes = read_topic(bootstrap, topic)
        if done(changes):
            return changes
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic}: condition not met, {len(changes)} records")
        time.sleep(0.2)


def fold(changes: list[Change]) -> dict[str, dict[str, Any]]:
    """The table a changelog describes: the last ``after`` per key; deletes and tombstones
    remove it."""
    table: dict[str, dict[str, Any]] = {}
    for change in changes:
        key = json.dumps(change.key, sort_keys=True)
        if change.value is None or change.value["op"] == "d":
            table.pop(key, None)
        elif change.value["op"] == "t":
            table.clear()
        else:
            table[key] = change.value["after"]
    return table


def table_rows(dsn: str, query: str, key_columns: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The rows of ``query`` keyed as :func:`fold` keys them."""
    connection = sql(dsn)
    try:
        cursor = connection.cursor()
        cursor.execute(query)
        names = [d.name for d in cursor.description]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    finally:
        connection.close()
    return {json.dumps({k: row[k] for k in key_columns}, sort_keys=True): row for row in rows}


def create_counters(dsn: str, rows: int) -> None:
    connection = sql(dsn)
    connection.cursor().execute(
        "CREATE TABLE counters (id int PRIMARY KEY, n bigint NOT NULL, note text); "
        f"INSERT INTO counters SELECT g, 0, 'row ' || g FROM generate_series(1, {rows}) g"
    )
    connection.close()


def counter_rows(dsn: str) -> dict[str, dict[str, Any]]:
    """The counters table as :func:`fold` makes a topic of it."""
    return table_rows(dsn, "SELECT id, n, note FROM counters", ("id",))


def start_writing_counters(dsn: str, rows: int, *, seed: int) -> Writer:
    """A counters table of ``rows`` rows, and a :class:`Writer` already at work on it."""
    create_counters(dsn, rows)
    writer = Writer(dsn, rows, seed)
    writer.start()
    return writer


class Writer(threading.Thread):
    """Transactions of 1-4 statements: +1 on random rows, some inserts and deletes."""

    def __init__(self, dsn: str, rows: int, seed: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.rows, self.random = dsn, rows, random.Random(seed)
        self.stop = threading.Event()
        self.transactions = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            connection = sql(self.dsn)
            connection.autocommit = False
            cursor = connection.cursor()
            next_id = self.rows + 1
            while not self.stop.is_set():
                for _ in range(self.random.randint(1, 4)):
                    roll = self.random.random()
                    if roll < 0.1:
                        cursor.execute("INSERT INTO counters VALUES (%s, 0, 'new')", (next_id,))
                        next_id += 1
                    elif roll < 0.15:
                        cursor.execute(
                            "DELETE FROM counters WHERE id = %s",
                            (self.random.randint(1, next_id),),
                        )
                    else:
                        cursor.execute(
                            "UPDATE counters SET n = n + 1 WHERE id = %s",
                            (self.random.randint(1, next_id - 1),),
                        )
                connection.commit()
                self.transactions += 1
                time.sleep(0.001)
            connection.close()
        except BaseException as e:  # reported by finish()
            self.error = e

    def finish(self) -> None:
        self.stop.set()
        self.join(30)
        if self.error is not None:
            raise self.error


def check_counter_runs(changes: list[Change]) -> dict[str, int]:
    """Every key's values run without a gap or a repeat; a tombstone right after each delete;
    each key's (commitLsn, lsn) grows (the README's deduplication rule relies on it).
    Returns how many events of each op there were."""
    current: dict[str, int | None] = {}
    positions: dict[str, tuple[int, int]] = {}
    ops: dict[str, int] = {}
    for i, change in enumerate(changes):
        key = json.dumps(change.key, sort_keys=True)
        if change.value is None:
            previous = changes[i - 1]
            assert previous.op == "d" and previous.key == change.key, f"stray tombstone {i}"
            continue
        op = change.op
        assert op is not None
        ops[op] = ops.get(op, 0) + 1
        n = None if change.value["after"] is None else change.value["after"]["n"]
        was = current.get(key)
        source = change.value["source"]
        position = (source["commitLsn"], source["lsn"])
        assert position > positions.get(key, (-1, -1)), f"key {key}: {position} at {i}"
        positions[key] = position
        if op in ("r", "c"):
            broken = was is not None
        elif op == "u":
            broken = was is None or n != was + 1
        else:
            followed = i + 1 < len(changes) and changes[i + 1].value is None
            broken = was is None or op != "d" or not followed
        if broken:
            history = [
                (j, c.op, c.value and c.value["source"]["lsn"], c.value and c.value["after"])
                for j, c in enumerate(changes)
                if c.key == change.key and c.value is not None
            ]
            raise AssertionError(f"key {key}: {op} at {i} after {was}; history {history}")
        current[key] = n
    return ops
