"""What the capture tests share: a database per test, ``riverbed cdc run`` as a child
process, reading a CDC topic back, and folding it into the table it describes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2
from confluent_kafka import Consumer, KafkaError, TopicPartition

from tests.cdc.postgres import PostgresCluster


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
