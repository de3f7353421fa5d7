"""What the capture tests share: ``riverbed cdc run`` as a child
process, reading a CDC topic back, and folding it into the table it describes; a writer
of random transactions and the check of what it leaves in the topic; the text values the
parsers' property tests draw."""

from __future__ import annotations

import json
import random
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from riverbed.testing.postgres import sql
from riverbed.testing.topic_reader import read_to_end
from tests.support.cli import ChildProcess, run_riverbed


def text_values(*more: st.SearchStrategy[str]) -> st.SearchStrategy[list[str | None]]:
    """1 to 6 values a text column holds: NULL or any text (no NUL, which PostgreSQL refuses,
    and no lone surrogate, which UTF-8 cannot encode), or one of ``more``."""
    text = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]))
    return st.lists(st.one_of(st.none(), text, *more), min_size=1, max_size=6)


class Capture(ChildProcess):
    """``riverbed cdc run ARGS`` as a child process; its stderr in ``log_path``."""

    @classmethod
    def start(cls, tmp_path: Path, *args: str) -> Capture:
        child = ChildProcess.spawn(tmp_path / f"cdc-{time.monotonic_ns()}.log", "cdc", "run", *args)
        return cls(child.process, child.log_path)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)


def run_capture(
    tmp_path: Path, *args: str, timeout_s: float = 60
) -> subprocess.CompletedProcess[str]:
    """``riverbed cdc ...`` to completion (for commands that fail or end by themselves)."""
    return run_riverbed("cdc", *args, timeout_s=timeout_s, cwd=tmp_path)


@dataclass(frozen=True)
class Change:
    key: dict[str, Any]
    value: dict[str, Any] | None  # None: a tombstone
    headers: dict[str, bytes]

    @property
    def op(self) -> str | None:
        return None if self.value is None else self.value["op"]


def read_topic(bootstrap: str, topic: str, timeout_s: float = 30) -> list[Change]:
    """Every record of partition 0 of ``topic``, up to its current end (none if the topic
    does not exist yet)."""
    return [
        Change(
            json.loads(r.key or b"null"),
            None if r.value is None else json.loads(r.value),
            dict(r.headers or ()),
        )
        for r in read_to_end(bootstrap, topic, timeout_s=timeout_s)
        if r.partition == 0
    ]


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


def snapshot_reads(changes: list[Change]) -> int:
    """How many snapshot reads (``r``) there are, after checking they come first, before
    anything streamed: one snapshot, never redone (a resume reads none)."""
    reads = [i for i, change in enumerate(changes) if change.op == "r"]
    assert reads == list(range(len(reads))), "snapshot reads after streamed changes"
    return len(reads)


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
