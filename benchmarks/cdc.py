"""Change data capture from PostgreSQL: snapshot, streaming, lag and the writer's cost.

    .venv/bin/python benchmarks/cdc.py [--rows 500000] [--changes 300000] [--lag-seconds 20]
        [--updates 20000] [--bulk-rows 200000] [--repeat 3] [--quick] [--only NAME ...]

Starts a private PostgreSQL cluster (``riverbed/testing/postgres.py``, settings printed; see
PG_SETTINGS) and ``riverbed broker``, then runs ``riverbed cdc run`` as a child process,
each measurement in a new database of its own and with topics of its own:

1. **Snapshot** (target >= 50k rows/s): a ``users`` table of ``--rows`` rows (text key and
   four text columns), captured from scratch (log method). Timed from the capture's start
   until the topic's high watermark holds every row (the broker acknowledged them all); the
   capture's own "snapshot complete" rate is printed too.
2. **Streaming catch-up** (target >= 20k changes/s): with the capture stopped (the slot, or
   the audit table, keeps them), ``--changes`` row changes are committed in transactions of
   ten (an UPDATE of 8 rows, an INSERT, a DELETE: 11 records with the delete's tombstone);
   then the capture is started and timed until the topic holds every record. Log method,
   then trigger method.
3. **Lag** (target p95 < 500 ms): a writer paced at ``--lag-rate`` single-row transactions
   per second (90% updates, 5% inserts, 5% deletes) for ``--lag-seconds``, while the capture
   streams; a consumer tails the topic (fetch.wait.max.ms=10) and takes, per record, its
   receive time minus ``source.ts_ms`` (the commit time; for the trigger method the time of
   the transaction's last change). Log method, then trigger method with --poll-ms 100.
4. **Write-path overhead**: the writing application's time for ``--updates`` single-row
   UPDATE transactions and for one INSERT of ``--bulk-rows`` rows, with no capture, with the
   log-based capture running, and with the trigger-based capture running (each on both
   tables, started with --snapshot never); interleaved, ``--repeat`` times, medians. Also
   the CPU time of the writer's backend, of all PostgreSQL processes and of the capture
   meanwhile. The processes are pinned to cores for each of ``--placements`` (PLACEMENTS).

Client, broker, capture and PostgreSQL share the machine. Not part of the test run; results
go in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from _common import cpu_seconds_of, machine, percentile, print_table, start_broker
from confluent_kafka import Consumer, KafkaException, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' PostgreSQL
from riverbed.testing.postgres import SERVER_SETTINGS, PostgresCluster, database, sql

PG_SETTINGS = {"synchronous_commit": "on"}
"""Over the test cluster's settings (fsync=off, full_page_writes=off, wal_level=logical):
PostgreSQL's default synchronous_commit, so COMMIT returns after its WAL is written (not
fsynced, with fsync=off), and the walsender may send it at once. With the tests' ``off``, the
WAL writer writes it later (wal_writer_delay, 200 ms): the log method's lag measured p50 130
ms, p95 269 ms instead of 5 and 8 ms."""

QUICK = {
    "rows": 20_000,
    "changes": 20_000,
    "lag_seconds": 3.0,
    "updates": 2_000,
    "bulk_rows": 20_000,
    "repeat": 1,
}


DROP = ["--drop-slot"]
"""Every capture the benchmark stops for good drops its slot (or its triggers and audit
table), so that nothing is left to slow down the next measurement."""


def say(line: str) -> None:
    print(line, flush=True)


# -- the capture and the topics ------------------------------------------------------------


@dataclass
class Capture:
    """``riverbed cdc run`` as a child process, its stderr in a file."""

    process: subprocess.Popen[bytes]
    log_path: Path
    started: float  # time.monotonic() just before it was spawned

    @classmethod
    def start(
        cls,
        env: Bench,
        dsn: str,
        *,
        prefix: str,
        tables: str,
        method: str = "log",
        snapshot: str = "never",
        extra: Sequence[str] = (),
    ) -> Capture:
        log_path = env.tmp / f"cdc-{prefix}-{time.monotonic_ns()}.log"
        profile = []
        if env.profile_dir is not None:
            profile = ["-m", "cProfile", "-o", str(env.profile_dir / f"{prefix}.prof")]
        command = [
            *(sys.executable, *profile, "-m", "riverbed.cli.main", "cdc", "run"),
            *("--dsn", dsn, "--bootstrap", env.bootstrap, "--prefix", prefix),
            *("--tables", tables, "--method", method, "--snapshot", snapshot, *extra),
        ]
        started = time.monotonic()
        with log_path.open("wb") as log:
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
        return cls(process, log_path, started)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout_s: float = 120) -> tuple[float, re.Match[str]]:
        """When ``pattern`` appeared in the log (within 5 ms), and its match."""
        deadline = time.monotonic() + timeout_s
        while True:
            match = re.search(pattern, self.log())
            if match:
                return time.monotonic(), match
            if self.process.poll() is not None:
                raise SystemExit(f"the capture exited {self.process.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise SystemExit(f"no {pattern!r} within {timeout_s} s:\n{self.log()}")
            time.sleep(0.005)

    def wait_streaming(self) -> float:
        return self.wait_for(r"streaming from slot|draining ")[0]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        if self.process.wait(timeout=120) != 0:
            raise SystemExit(f"the capture exited {self.process.returncode}:\n{self.log()}")


@dataclass
class Bench:
    postgres: PostgresCluster
    bootstrap: str
    tmp: Path
    profile_dir: Path | None
    broker_pid: int

    def __post_init__(self) -> None:
        self._watermarks = Consumer(
            {"bootstrap.servers": self.bootstrap, "group.id": "bench-watermarks"}
        )

    def high_watermark(self, topic: str) -> int:
        try:
            _, high = self._watermarks.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        except KafkaException:  # the capture has not created the topic yet
            return 0
        return int(high)

    def wait_for_records(
        self, topic: str, count: int, capture: Capture, timeout_s: float = 600
    ) -> float:
        """When ``topic`` held ``count`` records (polled every 20 ms)."""
        deadline = time.monotonic() + timeout_s
        while self.high_watermark(topic) < count:
            if capture.process.poll() is not None:
                raise SystemExit(f"the capture exited:\n{capture.log()}")
            if time.monotonic() > deadline:
                have = self.high_watermark(topic)
                raise SystemExit(f"{topic}: {have} of {count} records after {timeout_s} s")
            time.sleep(0.02)
        return time.monotonic()

    def check_records(self, topic: str, count: int) -> None:
        have = self.high_watermark(topic)
        if have != count:
            raise SystemExit(f"{topic}: {have} records, expected exactly {count}")

    def close(self) -> None:
        self._watermarks.close()


def postgres_processes(postgres: PostgresCluster) -> list[psutil.Process]:
    pid = int((postgres.directory / "data" / "postmaster.pid").read_text().split()[0])
    postmaster = psutil.Process(pid)
    return [postmaster, *postmaster.children(recursive=True)]


class PostgresCpu:
    """CPU seconds (user + system) of the cluster's processes since the last lap: the live
    ones, plus what the postmaster's ended children used (it reaps every backend)."""

    def __init__(self, postgres: PostgresCluster) -> None:
        self._postgres = postgres
        self._last = self._total()

    def _total(self) -> float:
        postmaster, *children = postgres_processes(self._postgres)
        own = postmaster.cpu_times()
        total = own.user + own.system + own.children_user + own.children_system
        for process in children:
            with contextlib.suppress(psutil.Error):  # it has just ended
                total += cpu_seconds_of(process)
        return float(total)

    def lap(self) -> float:
        now = self._total()
        used, self._last = now - self._last, now
        return used


class CpuUse:
    """CPU seconds of a capture process, PostgreSQL and the broker from now on."""

    def __init__(self, env: Bench) -> None:
        self._server = PostgresCpu(env.postgres)
        self._broker = psutil.Process(env.broker_pid)
        self._broker_start = cpu_seconds_of(self._broker)

    def report(self, capture: Capture, seconds: float) -> str:
        """While ``capture`` still runs; ``seconds``: the measurement's length."""
        used = {
            "the capture": cpu_seconds_of(psutil.Process(capture.process.pid)),
            "PostgreSQL": self._server.lap(),
            "the broker": cpu_seconds_of(self._broker) - self._broker_start,
        }
        return "CPU: " + ", ".join(
            f"{name} {value:.1f} s ({value / seconds:.0%} of a core)"
            for name, value in used.items()
        )


def settle(connection: Any, table: str, *, close: bool = True) -> None:
    """VACUUM and CHECKPOINT after a load, so that neither runs during a measurement."""
    cursor = connection.cursor()
    cursor.execute(f"VACUUM ANALYZE {table}")
    cursor.execute("CHECKPOINT")
    if close:
        connection.close()


# -- 1. snapshot -----------------------------------------------------------------------------


def bench_snapshot(env: Bench, rows: int) -> dict[str, float]:
    with database(env.postgres) as dsn:
        connection = sql(dsn)
        connection.cursor().execute(
            "CREATE TABLE users (user_id text PRIMARY KEY, name text, email text, "
            "country text, tier text); "
            "INSERT INTO users SELECT 'user-' || g, 'Name ' || g, 'user' || g || '@example.com', "
            "(ARRAY['SE','DE','FR','US','JP'])[1 + g % 5], "
            f"(ARRAY['free','pro','team'])[1 + g % 3] FROM generate_series(1, {rows}) g"
        )
        settle(connection, "users")
        cpu = CpuUse(env)
        capture = Capture.start(
            env, dsn, prefix="snap", tables="public.users", snapshot="initial", extra=DROP
        )
        done = env.wait_for_records("snap.public.users", rows, capture)
        cpu_report = cpu.report(capture, done - capture.started)
        _, match = capture.wait_for(r"snapshot complete: \d+ rows in ([\d.]+) s \((\d+) rows/s")
        capture.stop()
        env.check_records("snap.public.users", rows)
    own_s = float(match.group(1))
    result = {
        "rows": rows,
        "end_to_end_s": done - capture.started,
        "own_s": own_s,
        "own_rate": float(match.group(2)),
    }
    result["rate"] = rows / result["end_to_end_s"]
    say(
        f"snapshot: {rows:,} rows in {result['end_to_end_s']:.2f} s from the capture's start "
        f"= {result['rate']:,.0f} rows/s; the capture's own figure {own_s:.1f} s "
        f"({result['own_rate']:,.0f} rows/s)\n  {cpu_report}"
    )
    return result


# -- 2. streaming catch-up -------------------------------------------------------------------


def accounts_table(dsn: str, rows: int) -> None:
    connection = sql(dsn)
    connection.cursor().execute(
        "CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, balance bigint NOT "
        "NULL, updated_at timestamptz NOT NULL); "
        "INSERT INTO accounts SELECT g, 'owner ' || g, 1000, now() "
        f"FROM generate_series(1, {rows}) g"
    )
    settle(connection, "accounts")


def bench_streaming(env: Bench, method: str, changes: int) -> dict[str, float]:
    """Catch-up after ``changes`` row changes committed while the capture was stopped."""
    transactions = changes // 10
    rows = 2 * transactions + 1000  # deletes take ids 1..T, updates 8 rows of [T+1, 2T+999]
    prefix = f"stream_{method}"
    topic = f"{prefix}.public.accounts"
    with database(env.postgres) as dsn:
        accounts_table(dsn, rows)
        capture = Capture.start(env, dsn, prefix=prefix, tables="public.accounts", method=method)
        capture.wait_streaming()
        capture.stop()  # the slot (or the triggers) now keep every change
        connection = sql(dsn)
        started = time.monotonic()
        connection.cursor().execute(
            "DO $$ DECLARE s int; BEGIN "
            f"FOR i IN 1..{transactions} LOOP "
            f"  s := {transactions} + 1 + (i::bigint * 7919) % {transactions + 992}; "
            "  UPDATE accounts SET balance = balance + 1, updated_at = clock_timestamp() "
            "    WHERE id BETWEEN s AND s + 7; "
            f"  INSERT INTO accounts VALUES ({rows} + i, 'new ' || i, 0, clock_timestamp()); "
            "  DELETE FROM accounts WHERE id = i; "
            "  COMMIT; "
            "END LOOP; END $$"
        )
        writer_s = time.monotonic() - started
        connection.close()
        expected = transactions * 11
        cpu = CpuUse(env)
        capture = Capture.start(
            env,
            dsn,
            prefix=prefix,
            tables="public.accounts",
            method=method,
            extra=DROP,
        )
        streaming = capture.wait_streaming()
        done = env.wait_for_records(topic, expected, capture)
        cpu_report = cpu.report(capture, done - capture.started)
        capture.stop()
        env.check_records(topic, expected)
    count = transactions * 10
    result = {
        "changes": count,
        "records": expected,
        "writer_s": writer_s,
        "startup_s": streaming - capture.started,
        "catch_up_s": done - streaming,
        "rate": count / (done - streaming),
        "end_to_end_rate": count / (done - capture.started),
    }
    say(
        f"streaming ({method}): {count:,} changes ({expected:,} records) written in "
        f"{writer_s:.1f} s; caught up in {result['catch_up_s']:.2f} s after "
        f"{result['startup_s']:.2f} s of start-up = {result['rate']:,.0f} changes/s "
        f"({result['end_to_end_rate']:,.0f} changes/s counting start-up)\n  {cpu_report}"
    )
    return result


# -- 3. lag ----------------------------------------------------------------------------------


class Tail(threading.Thread):
    """Reads ``topic`` from offset 0, noting each change's receive time minus its
    ``source.ts_ms``; tombstones are counted, not timed."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-lag-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
            }
        )
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.lags_ms: list[float] = []
        self.records = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            # poll, not consume(n, timeout): consume() waits for n messages or the timeout.
            message = self.consumer.poll(0.05)
            if message is None or message.error() is not None:
                continue
            received_ms = time.time() * 1000
            self.records += 1
            value = message.value()
            if value is not None:
                self.lags_ms.append(received_ms - json.loads(value)["source"]["ts_ms"])
        self.consumer.close()


def paced_writer(dsn: str, rate: float, seconds: float, rows: int) -> tuple[int, int, float]:
    """Single-row transactions at ``rate`` per second: (changes, records, seconds taken)."""
    pick = random.Random(7)
    total = int(rate * seconds)
    connection = sql(dsn)
    cursor = connection.cursor()
    deleted = inserted = records = 0
    started = time.monotonic()
    for i in range(total):
        ahead = started + i / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
        roll = pick.random()
        if roll < 0.05:
            inserted += 1
            cursor.execute("INSERT INTO accounts VALUES (%s, 'new', 0, now())", (rows + inserted,))
            records += 1
        elif roll < 0.10:
            deleted += 1  # ids 1..total/10 at most; updates stay above them
            cursor.execute("DELETE FROM accounts WHERE id = %s", (deleted,))
            records += 2
        else:
            cursor.execute(
                "UPDATE accounts SET balance = balance + 1, updated_at = now() WHERE id = %s",
                (pick.randint(total // 10 + 1, rows),),
            )
            records += 1
    elapsed = time.monotonic() - started
    connection.close()
    return total, records, elapsed


def bench_lag(env: Bench, method: str, rate: float, seconds: float) -> dict[str, float]:
    rows = max(100_000, int(rate * seconds))
    prefix = f"lag_{method}"
    topic = f"{prefix}.public.accounts"
    with database(env.postgres) as dsn:
        accounts_table(dsn, rows)
        extra = [*DROP, *(["--poll-ms", "100"] if method == "trigger" else [])]
        capture = Capture.start(
            env, dsn, prefix=prefix, tables="public.accounts", method=method, extra=extra
        )
        capture.wait_streaming()
        tail = Tail(env.bootstrap, topic)
        tail.start()
        time.sleep(1)  # the consumer has joined and fetches
        changes, records, elapsed = paced_writer(dsn, rate, seconds, rows)
        deadline = time.monotonic() + 60
        while tail.records < records and time.monotonic() < deadline:
            time.sleep(0.05)
        tail.stop.set()
        tail.join(10)
        capture.stop()
    if tail.records != records:
        raise SystemExit(f"lag ({method}): {tail.records} records of {records} arrived")
    lags = tail.lags_ms
    result = {
        "achieved": changes / elapsed,
        "p50": percentile(lags, 0.50),
        "p95": percentile(lags, 0.95),
        "p99": percentile(lags, 0.99),
        "max": max(lags),
    }
    say(
        f"lag ({method}): {changes:,} changes at {result['achieved']:,.0f}/s; commit to "
        f"consumer p50 {result['p50']:.0f} ms, p95 {result['p95']:.0f} ms, p99 "
        f"{result['p99']:.0f} ms, max {result['max']:.0f} ms"
    )
    return result


# -- 4. write-path overhead -----------------------------------------------------------------


PLACEMENTS = ("isolated", "shared", "free")
"""Where the overhead measurement's processes run. On a VM with idle cores, a writer's round
trips are slow for reasons of the VM's (a vCPU that idles is woken by the hypervisor): 20,000
single-row UPDATEs took 2.6 s with both cores otherwise idle, 0.6 s with the writer and its
backend on one core, or with a busy process on the other core. So the writer and its backend
share one core ("shared": the capture, the broker and the rest of PostgreSQL run anywhere,
and compete with the writer for the cores), or, "isolated", everything else runs on the
other cores, as a capture on its own machine would (only its database work stays on the
server, on the other core). "free" pins nothing."""


def set_affinity(pid: int, cpus: set[int]) -> None:
    """Every thread of ``pid`` (sched_setaffinity moves one thread only)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # the thread has ended
            os.sched_setaffinity(int(task.name), cpus)


def place(placement: str, env: Bench, backend: int, capture_pid: int | None) -> Callable[[], None]:
    """Pin the processes for ``placement`` (PLACEMENTS); returns what undoes it."""
    everywhere = os.sched_getaffinity(0)
    cores = sorted(everywhere)
    writer, rest = {cores[0]}, set(cores[1:]) or {cores[0]}
    moved = []
    if placement == "isolated":
        moved = [p.pid for p in postgres_processes(env.postgres)] + [env.broker_pid]
        moved += [] if capture_pid is None else [capture_pid]
        for pid in moved:
            set_affinity(pid, rest)
    if placement != "free":
        os.sched_setaffinity(0, writer)
        os.sched_setaffinity(backend, writer)

    def undo() -> None:
        os.sched_setaffinity(0, everywhere)  # the next capture is spawned from this thread
        for pid in moved:
            if psutil.pid_exists(pid):
                set_affinity(pid, everywhere)

    return undo


OVERHEAD_FIGURES = ("writer time", "writer's backend CPU", "all PostgreSQL CPU", "capture CPU")


def overhead_once(
    env: Bench, placement: str, mode: str, run: int, updates: int, bulk_rows: int
) -> dict[str, list[float]]:
    """Per phase ("updates", "insert"), the OVERHEAD_FIGURES in seconds, with capture
    ``mode`` (none, log or trigger) running, processes placed by ``placement``."""
    rows = 100_000
    with database(env.postgres) as dsn:
        connection = sql(dsn)
        cursor = connection.cursor()
        cursor.execute(
            "CREATE TABLE items (id int PRIMARY KEY, qty int NOT NULL, note text); "
            f"INSERT INTO items SELECT g, 0, 'item ' || g FROM generate_series(1, {rows}) g; "
            "CREATE TABLE events (id bigint PRIMARY KEY, kind text NOT NULL, payload text, "
            "created_at timestamptz NOT NULL)"
        )
        settle(connection, "items", close=False)
        capture = None
        if mode != "none":
            capture = Capture.start(
                env,
                dsn,
                prefix=f"overhead_{placement}_{mode}_{run}",
                tables="public.items,public.events",
                method=mode,
                extra=DROP,
            )
            capture.wait_streaming()
            time.sleep(1)  # the capture's start-up work is over
        ids = random.Random(run).choices(range(1, rows + 1), k=updates)
        cursor.execute("SELECT pg_backend_pid()")
        backend = psutil.Process(cursor.fetchone()[0])
        captured = None if capture is None else psutil.Process(capture.process.pid)
        undo = place(placement, env, backend.pid, None if captured is None else captured.pid)
        figures: dict[str, list[float]] = {}
        try:
            server = PostgresCpu(env.postgres)

            def measure(phase: str, write: Callable[[], None]) -> None:
                backend_cpu = cpu_seconds_of(backend)
                capture_cpu = 0.0 if captured is None else cpu_seconds_of(captured)
                server.lap()
                started = time.monotonic()
                write()
                figures[phase] = [
                    time.monotonic() - started,
                    cpu_seconds_of(backend) - backend_cpu,
                    server.lap(),
                    0.0 if captured is None else cpu_seconds_of(captured) - capture_cpu,
                ]

            def update() -> None:
                for id_ in ids:
                    cursor.execute("UPDATE items SET qty = qty + 1 WHERE id = %s", (id_,))

            measure("updates", update)
            measure(
                "insert",
                lambda: cursor.execute(
                    "INSERT INTO events SELECT g, 'kind ' || g % 10, 'payload of event ' || g, "
                    f"now() FROM generate_series(1, {bulk_rows}) g"
                ),
            )
        finally:
            undo()
        connection.close()
        if capture is not None:
            capture.stop()
    return figures


def bench_overhead(
    env: Bench, placement: str, updates: int, bulk_rows: int, repeat: int
) -> dict[str, dict[str, list[float]]]:
    """Per mode and phase, the medians of the OVERHEAD_FIGURES over ``repeat`` runs."""
    runs: dict[str, list[dict[str, list[float]]]] = {"none": [], "log": [], "trigger": []}
    for run in range(repeat):
        for mode, results in runs.items():
            results.append(overhead_once(env, placement, mode, run, updates, bulk_rows))
            figures = "; ".join(
                f"{phase} " + " / ".join(f"{v:.2f}" for v in values)
                for phase, values in results[-1].items()
            )
            say(f"overhead ({placement}) run {run + 1}, {mode}: {figures} s")
    return {
        mode: {
            phase: [statistics.median(r[phase][i] for r in results) for i in range(4)]
            for phase in ("updates", "insert")
        }
        for mode, results in runs.items()
    }


# -- the report ------------------------------------------------------------------------------


def met(ok: bool) -> str:
    return "yes" if ok else "NO"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=500_000, help="snapshot rows")
    parser.add_argument("--changes", type=int, default=300_000, help="catch-up changes")
    parser.add_argument("--lag-rate", type=float, default=2_000, help="changes/s")
    parser.add_argument("--lag-seconds", type=float, default=20)
    parser.add_argument("--updates", type=int, default=20_000, help="single-row UPDATEs")
    parser.add_argument("--bulk-rows", type=int, default=200_000, help="rows of the INSERT")
    parser.add_argument("--repeat", type=int, default=3, help="overhead runs per mode")
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=("snapshot", "streaming", "lag", "overhead"),
        default=("snapshot", "streaming", "lag", "overhead"),
    )
    parser.add_argument(
        "--pg-set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a PostgreSQL setting over PG_SETTINGS (repeatable)",
    )
    parser.add_argument(
        "--placements",
        nargs="+",
        choices=PLACEMENTS,
        default=("isolated", "shared"),
        help="where the overhead measurement's processes run (see PLACEMENTS)",
    )
    parser.add_argument(
        "--profile", type=Path, help="run every capture under cProfile, output in this directory"
    )
    args = parser.parse_args()
    if args.quick:
        for name, value in QUICK.items():
            setattr(args, name, value)
    settings = dict(PG_SETTINGS)
    for item in args.pg_set:
        name, _, value = item.partition("=")
        settings[name] = value
    say(f"machine: {machine()}")
    postgres = PostgresCluster.start(**settings)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            broker, bootstrap = start_broker(Path(tmp) / "data")
            if args.profile is not None:
                args.profile.mkdir(parents=True, exist_ok=True)
            env = Bench(postgres, bootstrap, Path(tmp), args.profile, broker.pid)
            try:
                connection = sql(postgres.dsn)
                cursor = connection.cursor()
                cursor.execute("SHOW server_version")
                version = cursor.fetchone()[0]
                connection.close()
                shown = {**SERVER_SETTINGS, **settings}
                shown.pop("listen_addresses", None)
                say(
                    f"PostgreSQL {version}: "
                    + ", ".join(f"{k}={v}" for k, v in sorted(shown.items()))
                )
                run(env, args)
            finally:
                env.close()
                broker.terminate()
                broker.wait(60)
    finally:
        postgres.stop()


def run(env: Bench, args: argparse.Namespace) -> None:
    summary: list[list[str]] = []

    def snapshot() -> None:
        r = bench_snapshot(env, args.rows)
        summary.append(
            [
                f"snapshot, {args.rows:,} rows (capture start to all acknowledged)",
                ">= 50,000 rows/s",
                f"{r['rate']:,.0f} rows/s",
                met(r["rate"] >= 50_000),
            ]
        )
        summary.append(
            [
                "snapshot, the capture's own 'snapshot complete' figure",
                ">= 50,000 rows/s",
                f"{r['own_rate']:,.0f} rows/s",
                met(r["own_rate"] >= 50_000),
            ]
        )

    def streaming() -> None:
        for method in ("log", "trigger"):
            r = bench_streaming(env, method, args.changes)
            summary.append(
                [
                    f"catch-up, {r['changes']:,} changes ({method}); counting start-up",
                    ">= 20,000 changes/s",
                    f"{r['rate']:,.0f}; {r['end_to_end_rate']:,.0f} changes/s",
                    met(r["rate"] >= 20_000),
                ]
            )

    def lag() -> None:
        for method in ("log", "trigger"):
            r = bench_lag(env, method, args.lag_rate, args.lag_seconds)
            name = method if method == "log" else "trigger, --poll-ms 100"
            summary.append(
                [
                    f"lag at {r['achieved']:,.0f} changes/s ({name}): p50 / p95 / p99 / max",
                    "p95 < 500 ms",
                    f"{r['p50']:.0f} / {r['p95']:.0f} / {r['p99']:.0f} / {r['max']:.0f} ms",
                    met(r["p95"] < 500),
                ]
            )

    def overhead() -> None:
        names = {
            "updates": f"{args.updates:,} UPDATE txns",
            "insert": f"INSERT of {args.bulk_rows:,} rows",
        }
        for placement in args.placements:
            medians = bench_overhead(env, placement, args.updates, args.bulk_rows, args.repeat)
            rows = []
            for phase, name in names.items():
                base = medians["none"][phase]
                for mode in ("none", "log", "trigger"):
                    cells = [name if mode == "none" else "", mode]
                    for i, value in enumerate(medians[mode][phase]):
                        change = ""
                        if mode != "none" and i < 3:
                            change = f" ({value / base[i] - 1:+.0%})"
                        cells.append(f"{value:.2f} s{change}")
                    rows.append(cells)
            say(f"\nwrite-path overhead, {placement}, medians of {args.repeat} (in brackets:")
            say("against no capture)")
            print_table(["phase", "capture", *OVERHEAD_FIGURES], rows)

    steps: dict[str, Callable[[], None]] = {
        "snapshot": snapshot,
        "streaming": streaming,
        "lag": lag,
        "overhead": overhead,
    }
    for name in args.only:
        steps[name]()
    if summary:
        say("")
        print_table(["measurement", "target", "result", "met"], summary)


if __name__ == "__main__":
    main()
