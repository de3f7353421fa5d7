"""What the sink tests share: a products table under a random OLTP workload (inserts,
updates, key changes, TOASTed values left unchanged, deletes, a column added midway), and
``riverbed sink run`` / ``riverbed sink verify`` as child processes; a store that records
what the runner asks of it (:class:`Recording`)."""

from __future__ import annotations

import gc
import random
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import orjson
import psycopg2

from riverbed.sinks.changes import Change, SinkError, change_of
from riverbed.sinks.store import Positions, Store, TopicPartition
from tests.support.cli import ChildProcess, run_riverbed

PRODUCTS = "shop.public.products"
BIG = 4_000
"""Characters of a ``body`` PostgreSQL TOASTs (compressed or not: random text)."""


S = TypeVar("S", bound=Store)


def opened(store: S) -> Iterator[S]:
    """``store`` opened, closed after (a fixture's ``yield from``)."""
    store.open()
    try:
        yield store
    finally:
        store.close()


def cdc_change(
    topic: str, op: str, key: dict[str, Any], after: dict[str, Any] | None = None
) -> Change:
    """A Debezium change of ``topic`` (``PREFIX.SCHEMA.TABLE``), as riverbed's capture
    writes it."""
    schema, table = topic.split(".")[-2:]
    envelope = {"before": None, "after": after, "op": op, "ts_ms": 1,
                "source": {"table": table, "schema": schema, "lsn": 1}}  # fmt: skip
    return change_of(topic, orjson.dumps(key), orjson.dumps(envelope), cdc=False)


def changelog_entry(topic: str, key: dict[str, Any], value: dict[str, Any] | None) -> Change:
    """A changelog's entry (a null value: a tombstone)."""
    encoded = None if value is None else orjson.dumps(value)
    return change_of(topic, orjson.dumps(key), encoded, cdc=False)


def create_products(dsn: str, rows: int, *, seed: int) -> None:
    rng = random.Random(seed)
    with psycopg2.connect(dsn) as connection, connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE products (product_id text PRIMARY KEY, title text, "
            "price numeric(10, 2), stock int, updated timestamptz, body text)"
        )
        cursor.execute("ALTER TABLE products ALTER COLUMN body SET STORAGE EXTERNAL")
        for n in range(rows):
            cursor.execute(
                "INSERT INTO products VALUES (%s, %s, %s, %s, now(), %s)",
                (f"p{n}", f"product {n}", f"{rng.randint(100, 99_999) / 100:.2f}",
                 rng.randint(0, 50), _big(rng)),
            )  # fmt: skip
    connection.close()


def _big(rng: random.Random) -> str:
    return "".join(rng.choice("abcdefghij ") for _ in range(BIG))


class ProductWriter(threading.Thread):
    """Random transactions on ``products`` until ``finish()``; ``ALTER TABLE ADD COLUMN
    color`` once, after ``alter_after`` transactions."""

    def __init__(self, dsn: str, *, seed: int, alter_after: int = 40) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.rng = random.Random(seed)
        self.alter_after = alter_after
        self.transactions = 0
        self.error: BaseException | None = None
        self._finishing = threading.Event()
        self._next_id = 100_000

    def run(self) -> None:
        try:
            connection = psycopg2.connect(self.dsn)
            try:
                while not self._finishing.is_set():
                    with connection, connection.cursor() as cursor:
                        for _ in range(self.rng.randint(1, 4)):
                            self._one(cursor)
                    self.transactions += 1
                    if self.transactions == self.alter_after:
                        with connection, connection.cursor() as cursor:
                            cursor.execute("ALTER TABLE products ADD COLUMN color text")
                    time.sleep(0.005)
            finally:
                connection.close()
        except BaseException as e:  # reported by finish()
            self.error = e

    def _one(self, cursor: object) -> None:
        rng, execute = self.rng, cursor.execute  # type: ignore[attr-defined]
        execute("SELECT product_id FROM products ORDER BY random() LIMIT 1")
        found = cursor.fetchone()  # type: ignore[attr-defined]
        roll = rng.random()
        if found is None or roll < 0.2:
            self._next_id += 1
            execute(
                "INSERT INTO products VALUES (%s, %s, %s, %s, now(), %s)",
                (f"p{self._next_id}", f"new product {self._next_id}", "1.50", 1, _big(rng)),
            )
            return
        (product_id,) = found
        if roll < 0.6:  # body unchanged: a TOASTed value the update does not send
            execute(
                "UPDATE products SET price = %s, stock = stock + 1, updated = now(), "
                "title = %s WHERE product_id = %s",
                (f"{rng.randint(100, 99_999) / 100:.2f}", f"title {rng.random():.6f}",
                 product_id),
            )  # fmt: skip
        elif roll < 0.7:
            execute("UPDATE products SET body = %s WHERE product_id = %s", (_big(rng), product_id))
        elif roll < 0.8:
            # A key change writes the body too: under REPLICA IDENTITY DEFAULT the new key's
            # row would arrive without an unchanged TOASTed value, which no store can know
            # (Debezium's documented limitation; REPLICA IDENTITY FULL sends it).
            self._next_id += 1
            execute(
                "UPDATE products SET product_id = %s, body = %s WHERE product_id = %s",
                (f"p{self._next_id}", _big(rng), product_id),
            )
        elif roll < 0.9 and self.transactions > self.alter_after:
            execute("UPDATE products SET color = %s WHERE product_id = %s",
                    (rng.choice(["red", "blue", None]), product_id))  # fmt: skip
        else:
            execute("DELETE FROM products WHERE product_id = %s", (product_id,))

    def finish(self) -> None:
        self._finishing.set()
        self.join(60)
        if self.error is not None:
            raise AssertionError(f"the writer failed: {self.error!r}")


def start_sink(tmp_path: Path, kind: str, bootstrap: str, *args: str) -> ChildProcess:
    return ChildProcess.spawn(
        tmp_path / f"sink-{kind}-{time.monotonic_ns()}.log",
        "sink", "run", kind, "--bootstrap", bootstrap, "--topics", PRODUCTS, *args,
    )  # fmt: skip


def run_sink(kind: str, bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``riverbed sink run KIND`` to completion (``--until-caught-up``, or a failure)."""
    return run_riverbed("sink", "run", kind, "--bootstrap", bootstrap, "--topics", PRODUCTS, *args)


def verify(dsn: str, *stores: str, timeout_s: int = 60) -> subprocess.CompletedProcess[str]:
    return run_riverbed(
        "sink", "verify", "--dsn", dsn, "--tables", "public.products", *stores,
        "--timeout-s", str(timeout_s), timeout_s=timeout_s + 60,
    )  # fmt: skip


class Recording:
    """A store that keeps what it is given, slowly (``apply`` takes ``apply_s``)."""

    name = "recording"

    def __init__(self, *, apply_s: float = 0.0, fail_at_batch: int | None = None) -> None:
        self.apply_s, self.fail_at_batch = apply_s, fail_at_batch
        self.threads: set[int] = set()
        self.applied: list[Change] = []
        self.sizes: list[int] = []
        self.committed: dict[TopicPartition, int] = {}
        self.applying: list[tuple[float, float]] = []  # each apply's start and end
        self.thresholds: set[tuple[int, int, int]] = set()
        self.closed = False

    def open(self) -> None:
        self.threads.add(threading.get_ident())

    def positions(self) -> dict[TopicPartition, int]:
        self.threads.add(threading.get_ident())
        return dict(self.committed)

    def apply(self, changes: Sequence[Change]) -> None:
        self.threads.add(threading.get_ident())
        self.thresholds.add(gc.get_threshold())
        started = time.monotonic()
        time.sleep(self.apply_s)
        self.applied += changes
        self.sizes.append(len(changes))
        self.applying.append((started, time.monotonic()))

    def commit(self, positions: Positions) -> None:
        self.threads.add(threading.get_ident())
        if self.fail_at_batch == len(self.applying):
            raise SinkError("the store is full")
        self.committed.update(positions)

    def close(self) -> None:
        self.threads.add(threading.get_ident())
        self.closed = True
