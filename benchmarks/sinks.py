"""Derived data: ``riverbed sink run`` into Redis, DuckDB and a Tantivy index, and the cache's
lag behind PostgreSQL.

    .venv/bin/python benchmarks/sinks.py [--changes 200000] [--keys 50000]
        [--latency-rate 2000] [--latency-seconds 20] [--latency-split]
        [--profile-dir DIR] [--only NAME ...]

Measurements (``--only``; all but ``profile`` unless told):

- ``redis``, ``duckdb``, ``search`` (targets >= 50,000 changes/s, >= 100,000 rows/s,
  >= 20,000 docs/s): a broker of its own (``riverbed broker``) holds the compacted CDC topic
  shop.public.products (4 partitions), filled with ``--changes`` records as riverbed's
  capture writes them (:func:`product_changes`: Debezium envelopes of a 6-column product row
  over ``--keys`` keys, murmur2-partitioned by key, each with the capture's position header;
  a delete is followed by its tombstone). Then, per store, ``riverbed sink run KIND
  --until-caught-up`` runs as a child process into a new store, timed by its stderr as it
  comes: from its "following" line to its "stopped: N changes applied" line (what the sink
  itself does), and from the process's start to its exit. After each run the store is read
  back and must hold exactly the topic's rows (the topic folded here: the last change per
  key, deleted keys gone) and the topic's end as its positions (:func:`check_redis`,
  :func:`check_duckdb`, :func:`check_search`).
- ``latency`` (target p95 < 100 ms): a private PostgreSQL (riverbed/testing/postgres.py,
  synchronous_commit=on) with a ``products`` table, ``riverbed cdc run`` and ``riverbed sink
  run redis`` as child processes. A writer thread commits single-row UPDATEs evenly paced at
  ``--latency-rate`` for ``--latency-seconds``, round robin over enough rows that none is
  updated twice within 5 s, each setting ``title`` to a unique token, and notes the time
  each commit returned. An observer thread gets Redis's keyspace notifications for
  ``products:*`` (``notify-keyspace-events Kh``), reads the row's ``title`` (HGET) on each
  ``hset`` and notes when each token was first seen: commit -> visible in the cache. With
  ``--latency-split``, a consumer of the CDC topic in a process of its own notes when each
  token reached the topic too, which splits the lag into the capture's part and the sink's.
- ``profile``: the three throughput runs again, py-spy attached to the sink from its
  "following" line to its exit (wall clock, idle included, every thread): the samples by
  function, inclusive and own (raw stacks in ``--profile-dir``).

It prints the machine, its speed (``_common.cpu_speed_ms``) before and after, and a table of
every figure against its target. Everything shares the machine; beside each measurement it
prints the CPU seconds the machine's *other* processes used meanwhile (:class:`Others`), as
the benchmarks' machine may be running other people's work. Not part of the test run;
results go in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import decimal
import multiprocessing
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import orjson
import psutil
import redis
from _common import (
    PRODUCER_SETTINGS,
    cpu_seconds_of,
    cpu_speed_ms,
    machine,
    percentile,
    print_table,
    start_broker,
)
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from riverbed.client.partitioner import murmur2_partition
from riverbed.sinks.duckdb_store import POSITIONS_TABLE
from riverbed.sinks.redis_store import POSITIONS_KEY
from riverbed.sinks.search_store import SearchStore
from riverbed.testing.postgres import SERVER_SETTINGS, PostgresCluster, database, sql
from riverbed.testing.redis import RedisServer

TOPIC = "shop.public.products"
TABLE = "products"
PARTITIONS = 4
DELETE_SHARE = 0.03
"""Of the changes to a row that exists: a delete (then its tombstone); the rest update it."""
THROUGHPUT_KINDS = ("redis", "duckdb", "search")
TARGETS = {"redis": 50_000, "duckdb": 100_000, "search": 20_000}
UNITS = {"redis": "changes/s", "duckdb": "rows/s", "search": "docs/s"}
LATENCY_TARGET_MS = 100
LATENCY_ROW_SECONDS = 5
"""The latency writer's round robin comes back to a row after this many seconds: a token is
not overwritten before the observer reads it."""
PG_SETTINGS = {"synchronous_commit": "on"}
"""Over the test cluster's settings (fsync=off, wal_level=logical): PostgreSQL's default, so
that a commit's WAL reaches the walsender at once, not when the WAL writer wakes (200 ms;
BENCHMARKS.md, "Change data capture")."""

WORDS = ("cotton", "linen", "wool", "blue", "black", "red", "slim", "classic", "summer",
         "winter", "organic", "striped", "vintage", "light", "heavy", "soft")  # fmt: skip
THINGS = ("shirt", "dress", "jacket", "scarf", "sock", "boot", "sneaker", "cap", "bag",
          "belt", "sweater", "coat")  # fmt: skip
CATEGORIES = ("tops", "dresses", "outerwear", "accessories", "footwear", "knitwear")
EPOCH = datetime.datetime(2026, 1, 1, 12, tzinfo=datetime.UTC)
EPOCH_MS = int(EPOCH.timestamp() * 1000)


def say(line: str = "") -> None:
    print(line, flush=True)


# -- CPU: the machine is shared ---------------------------------------------------------------


def machine_busy_seconds() -> tuple[float, float]:
    """CPU seconds all cores have spent since boot (/proc/stat) running processes (user,
    nice, system, steal), and serving interrupts (irq, softirq: on loopback, much of the
    network's work, which no process's CPU time counts)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    user, nice, system, _, _, irq, softirq, steal = map(int, fields)
    ticks = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + steal) / ticks, (irq + softirq) / ticks


def postgres_cpu_seconds(postgres: PostgresCluster | None) -> float:
    """The cluster's processes' CPU seconds: the live ones, plus what the postmaster's ended
    children used (it reaps every backend). Not this process's descendants: pg_ctl starts
    the postmaster in the background and exits."""
    if postgres is None:
        return 0.0
    pid = int((postgres.directory / "data" / "postmaster.pid").read_text().split()[0])
    postmaster = psutil.Process(pid)
    own = postmaster.cpu_times()
    total = own.user + own.system + own.children_user + own.children_system
    for process in postmaster.children(recursive=True):
        with contextlib.suppress(psutil.Error):  # it has just ended
            total += cpu_seconds_of(process)
    return float(total)


class Others:
    """CPU seconds the rest of the machine used from now on: the processes' busy time (every
    core's) less what this benchmark's processes used (this process, its child processes,
    live or ended, and PostgreSQL's); and the interrupts' time, which is not split by whose
    it is. Other people's work on a shared machine shows in the first."""

    def __init__(self, postgres: PostgresCluster | None = None) -> None:
        self._postgres = postgres
        self._started = time.monotonic()
        self._start = self._totals()

    def _totals(self) -> tuple[float, float, float]:
        mine = sum(os.times()[:4]) + postgres_cpu_seconds(self._postgres)
        for process in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                mine += cpu_seconds_of(process)
        processes, interrupts = machine_busy_seconds()
        return processes, interrupts, mine

    def report(self) -> str:
        processes, interrupts, mine = (
            now - then for now, then in zip(self._totals(), self._start, strict=True)
        )
        seconds = time.monotonic() - self._started
        return (
            f"CPU-s: this benchmark's processes {mine:.1f}, the machine's other processes "
            f"{max(0.0, processes - mine):.1f}, interrupts {interrupts:.1f}, of the "
            f"{2 * seconds:.1f} the 2 cores had in these {seconds:.1f} s"
        )


class CpuSplit:
    """CPU seconds from now on of PostgreSQL, of named processes, and of this process (the
    latency's writer and observer)."""

    def __init__(self, postgres: PostgresCluster, pids: dict[str, int]) -> None:
        self._postgres = postgres
        self._processes = {name: psutil.Process(pid) for name, pid in pids.items()}
        self._start = self._totals()

    def _totals(self) -> dict[str, float]:
        totals = {"PostgreSQL": postgres_cpu_seconds(self._postgres)}
        for name, process in self._processes.items():
            totals[name] = cpu_seconds_of(process)
        totals["the writer and the observer (this process)"] = sum(os.times()[:2])
        return totals

    def report(self) -> str:
        now = self._totals()
        return ", ".join(f"{name} {now[name] - then:.1f}" for name, then in self._start.items())


# -- the topic -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    partition: int
    key: bytes
    value: bytes | None
    header: bytes


@dataclass
class Topic:
    records: list[Record]
    final: dict[str, dict[str, Any]]
    """The topic folded: product_id -> its last row (deleted products absent)."""
    ends: dict[int, int] = field(default_factory=dict)
    """Partition -> its end offset (the records it holds)."""
    deletes: int = 0


def product_row(n: int, rng: random.Random, millis: int) -> dict[str, Any]:
    """A products row as the capture writes it: numeric as an exact string, timestamptz as
    ISO-8601 UTC with microseconds."""
    cents = rng.randint(199, 49_999)
    at = EPOCH + datetime.timedelta(milliseconds=millis, microseconds=rng.randrange(1000))
    return {
        "product_id": f"p{n}",
        "title": f"{rng.choice(WORDS).title()} {rng.choice(WORDS)} {rng.choice(THINGS)} {n}",
        "category": rng.choice(CATEGORIES),
        "price_cents": cents,
        "price": f"{cents // 100}.{cents % 100:02d}",
        "updated_at": at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    }


def product_changes(count: int, keys: int, *, seed: int) -> Topic:
    """``count`` records of shop.public.products over ``keys`` products, as riverbed's capture
    writes them (one transaction per change): op c for a product that does not exist, else u
    or, for DELETE_SHARE of them, d followed by its tombstone."""
    rng = random.Random(seed)
    rows: dict[int, dict[str, Any]] = {}
    records: list[Record] = []
    deletes = 0
    lsn = 0x1_0000_0000
    while len(records) < count:
        n = rng.randrange(keys)
        lsn += 256
        millis = len(records)
        key = orjson.dumps({"product_id": f"p{n}"})
        source = {
            "version": "riverbed", "connector": "postgresql", "name": "shop",
            "ts_ms": EPOCH_MS + millis, "snapshot": "false", "db": "shop", "schema": "public",
            "table": TABLE, "txId": 1000 + len(records), "lsn": lsn - 128, "commitLsn": lsn,
        }  # fmt: skip
        header = f"{lsn}:1".encode()
        partition = murmur2_partition(key, PARTITIONS)
        if n in rows and rng.random() < DELETE_SHARE and len(records) + 2 <= count:
            before = {c: None for c in rows.pop(n)} | {"product_id": f"p{n}"}
            envelope = {"before": before, "after": None, "source": source, "op": "d",
                        "ts_ms": EPOCH_MS + millis + 3}  # fmt: skip
            records.append(Record(partition, key, orjson.dumps(envelope), header))
            records.append(Record(partition, key, None, f"{lsn}:2".encode()))
            deletes += 1
            continue
        op = "u" if n in rows else "c"
        row = rows[n] = product_row(n, rng, millis)
        envelope = {"before": None, "after": row, "source": source, "op": op,
                    "ts_ms": EPOCH_MS + millis + 3}  # fmt: skip
        records.append(Record(partition, key, orjson.dumps(envelope), header))
    ends = Counter(r.partition for r in records)
    final = {row["product_id"]: row for row in rows.values()}
    return Topic(records, final, dict(ends), deletes)


def create_compacted(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(
        topic,
        num_partitions=partitions,
        replication_factor=1,
        config={"cleanup.policy": "compact"},
    )
    for future in admin.create_topics([new]).values():
        future.result(30)


def produce_records(bootstrap: str, records: Sequence[Record]) -> float:
    """Seconds to produce ``records`` (acks=all, PRODUCER_SETTINGS: _common's producer's
    settings; its ``produce`` sends unkeyed filler) and have every one acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **PRODUCER_SETTINGS})
    failures = 0

    def on_delivery(err: KafkaError | None, _message: object) -> None:
        nonlocal failures
        if err is not None:
            failures += 1

    producer.list_topics(TOPIC, timeout=10)
    started = time.perf_counter()
    for i, r in enumerate(records):
        producer.produce(
            TOPIC,
            r.value,
            r.key,
            partition=r.partition,
            headers=[("riverbed.cdc.position", r.header)],
            on_delivery=on_delivery,
        )
        if i % 50_000 == 0:
            producer.poll(0)
    if producer.flush(300) != 0 or failures:
        raise SystemExit(f"{failures} deliveries failed")
    return time.perf_counter() - started


# -- the sink as a child process --------------------------------------------------------------


def sink_command(kind: str, bootstrap: str, *options: str) -> list[str]:
    return [
        *(sys.executable, "-m", "riverbed.cli.main", "sink", "run", kind),
        *("--topics", TOPIC, "--bootstrap", bootstrap, *options),
    ]


def py_spy(pid: int, output: Path) -> subprocess.Popen[bytes]:
    """py-spy recording every thread of ``pid`` (wall clock, idle included, 250 samples a
    second, without pausing it) until the process exits."""
    command = [
        *(str(Path(sys.executable).parent / "py-spy"), "record", "--nonblocking", "--idle"),
        *("--threads", "--format", "raw", "--rate", "250", "-o", str(output)),
        *("--pid", str(pid)),
    ]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@dataclass
class SinkRun:
    changes: int
    batches: int
    own_s: float
    """From the "following" line to the "stopped" line."""
    total_s: float
    """From the process's start to its exit."""
    cpu_s: float
    """The sink process's CPU seconds, its threads included (from its rusage)."""
    others: str
    """What the machine's other processes used meanwhile (:class:`Others`)."""
    log: list[str]

    @property
    def own_rate(self) -> float:
        return self.changes / self.own_s

    @property
    def total_rate(self) -> float:
        return self.changes / self.total_s


def timed_sink(
    kind: str, bootstrap: str, options: Sequence[str], *, profile: Path | None = None
) -> SinkRun:
    """``riverbed sink run KIND --until-caught-up`` to its exit, its stderr timed line by
    line as it comes."""
    command = sink_command(kind, bootstrap, "--until-caught-up", *options)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    others = Others()
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    watchdog = threading.Timer(600, process.kill)
    watchdog.start()
    following = stopped = None
    log: list[str] = []
    spy = None
    assert process.stderr is not None
    for raw in process.stderr:
        at = time.monotonic()
        line = raw.decode(errors="replace").rstrip()
        log.append(line)
        if following is None and "following " in line:
            following = at
            if profile is not None:
                spy = py_spy(process.pid, profile)
        elif "stopped: " in line:
            stopped = at
    returncode = process.wait()
    ended = time.monotonic()
    watchdog.cancel()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    others_text = others.report()
    if spy is not None:
        _, errors = spy.communicate(timeout=120)
        if not profile or not profile.exists():
            raise SystemExit(f"py-spy failed: {errors.decode()}")
    text = "\n".join(log)
    match = re.search(r"stopped: ([\d,]+) changes applied in ([\d,]+) batches", text)
    if returncode != 0 or following is None or stopped is None or match is None:
        raise SystemExit(f"sink run {kind} exited {returncode}:\n{text}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return SinkRun(
        changes=int(match.group(1).replace(",", "")),
        batches=int(match.group(2).replace(",", "")),
        own_s=stopped - following,
        total_s=ended - started,
        cpu_s=cpu,
        others=others_text,
        log=log,
    )


# -- the checks -----------------------------------------------------------------------------


def expected_positions(topic: Topic) -> dict[tuple[str, int], int]:
    return {(TOPIC, p): topic.ends.get(p, 0) for p in range(PARTITIONS)}


def field_text(value: Any) -> str:
    """A column as the README says the Redis store holds it: a string as it is, anything
    else as its JSON text."""
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def differences(expected: dict[str, dict[str, Any]], found: dict[str, dict[str, Any]]) -> str:
    """Empty when equal, else a line saying how they differ, with an example."""
    missing = expected.keys() - found.keys()
    extra = found.keys() - expected.keys()
    different = [k for k in expected.keys() & found.keys() if expected[k] != found[k]]
    if not (missing or extra or different):
        return ""
    example = ""
    if different:
        k = min(different)
        example = f"; e.g. {k}: expected {expected[k]}, found {found[k]}"
    return f"{len(missing)} missing, {len(extra)} extra, {len(different)} different{example}"


def check_redis(url: str, topic: Topic) -> str:
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        keys = sorted(client.scan_iter(f"{TABLE}:*", count=10_000))
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.hgetall(key)
        found = {k.removeprefix(f"{TABLE}:"): v for k, v in zip(keys, pipe.execute(), strict=True)}
        positions = {
            (name.rpartition("/")[0], int(name.rpartition("/")[2])): int(offset)
            for name, offset in client.hgetall(POSITIONS_KEY).items()
        }
    finally:
        client.close()
    expected = {
        pid: {c: field_text(v) for c, v in row.items() if v is not None}
        for pid, row in topic.final.items()
    }
    return report_check(expected, found, positions, topic)


def check_duckdb(path: Path, topic: Topic) -> str:
    connection = duckdb.connect(str(path), read_only=True)
    try:
        connection.execute("SET TimeZone = 'UTC'")
        cursor = connection.execute(f"SELECT * FROM {TABLE}")
        names = [d[0] for d in cursor.description or ()]
        found = {}
        for values in cursor.fetchall():
            row = {n: duck_value(v) for n, v in zip(names, values, strict=True)}
            found[row["product_id"]] = row
        types = connection.execute(
            "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ?", [TABLE]
        ).fetchall()
        positions = {
            (t, p): o
            for t, p, o in connection.execute(
                f"SELECT topic, partition, next_offset FROM {POSITIONS_TABLE}"
            ).fetchall()
        }
    finally:
        connection.close()
    say("    DuckDB column types: " + ", ".join(f"{n} {t}" for n, t in types))
    return report_check(topic.final, found, positions, topic)


def duck_value(value: Any) -> Any:
    """A DuckDB value in the form the capture wrote it: a DECIMAL as its exact text, a
    TIMESTAMPTZ as ISO-8601 UTC with microseconds."""
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.datetime):
        return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return value


def check_search(directory: Path, topic: Topic) -> str:
    store = SearchStore(directory, read_only=True)
    store.open()
    try:
        found = store.rows(TABLE)
        positions = store.positions()
    finally:
        store.close()
    return report_check(topic.final, found, positions, topic)


def report_check(
    expected: dict[str, dict[str, Any]],
    found: dict[str, dict[str, Any]],
    positions: dict[tuple[str, int], int],
    topic: Topic,
) -> str:
    problems = differences(expected, found)
    if positions != expected_positions(topic):
        problems += f"; positions {positions}, expected {expected_positions(topic)}"
    if problems:
        raise SystemExit(f"check FAILED: {problems}")
    return f"check passed: {len(found):,} rows, exactly the topic's, positions at its end"


# -- 1. throughput ----------------------------------------------------------------------------


@dataclass
class Bench:
    args: argparse.Namespace
    tmp: Path
    summary: list[list[str]] = field(default_factory=list)
    topic: Topic | None = None

    def products(self) -> Topic:
        if self.topic is None:
            started = time.monotonic()
            self.topic = product_changes(self.args.changes, self.args.keys, seed=1)
            say(
                f"{len(self.topic.records):,} records made in {time.monotonic() - started:.1f} "
                f"s: {len(self.topic.final):,} products at the end, {self.topic.deletes:,} "
                "deletes (each followed by its tombstone), over "
                f"{self.args.keys:,} keys; partitions hold "
                + ", ".join(f"{self.topic.ends.get(p, 0):,}" for p in range(PARTITIONS))
            )
        return self.topic


def store_options(kind: str, directory: Path, redis_url: str) -> list[str]:
    if kind == "redis":
        return ["--redis", redis_url]
    if kind == "duckdb":
        return ["--database", str(directory / "shop.duckdb")]
    return ["--index", str(directory / "index")]


def check_store(kind: str, directory: Path, redis_url: str, topic: Topic) -> str:
    if kind == "redis":
        return check_redis(redis_url, topic)
    if kind == "duckdb":
        return check_duckdb(directory / "shop.duckdb", topic)
    return check_search(directory / "index", topic)


def throughput(bench: Bench, kinds: Sequence[str], *, profile_dir: Path | None = None) -> None:
    topic = bench.products()
    with tempfile.TemporaryDirectory(dir=bench.tmp) as tmp:
        directory = Path(tmp)
        broker, bootstrap = start_broker(directory / "broker")
        redis_server = RedisServer.start() if "redis" in kinds else None
        try:
            create_compacted(bootstrap, TOPIC, PARTITIONS)
            seconds = produce_records(bootstrap, topic.records)
            say(
                f"produced to {TOPIC} (compacted, {PARTITIONS} partitions) in {seconds:.1f} s "
                f"({len(topic.records) / seconds:,.0f} records/s, acks=all)"
            )
            broker_process = psutil.Process(broker.pid)
            redis_process = (
                None if redis_server is None else psutil.Process(redis_server.process.pid)
            )
            url = "" if redis_server is None else redis_server.url
            for kind in kinds:
                profile = None if profile_dir is None else profile_dir / f"sink-{kind}.pyspy.txt"
                broker_cpu = cpu_seconds_of(broker_process)
                redis_cpu = 0.0 if redis_process is None else cpu_seconds_of(redis_process)
                store = directory / kind
                store.mkdir()
                run = timed_sink(kind, bootstrap, store_options(kind, store, url), profile=profile)
                broker_cpu = cpu_seconds_of(broker_process) - broker_cpu
                if redis_process is not None:
                    redis_cpu = cpu_seconds_of(redis_process) - redis_cpu
                unit = UNITS[kind]
                under = " under py-spy" if profile is not None else ""
                say(
                    f"\n{kind}{under}: {run.changes:,} changes in {run.batches:,} batches; "
                    f"following -> stopped {run.own_s:.2f} s = {run.own_rate:,.0f} {unit}; "
                    f"start -> exit {run.total_s:.2f} s = {run.total_rate:,.0f} {unit}"
                )
                cpu = f"    CPU: the sink {run.cpu_s:.1f} s, the broker {broker_cpu:.1f} s"
                if kind == "redis":
                    cpu += f", redis-server {redis_cpu:.1f} s"
                say(f"{cpu} (over {run.total_s:.1f} s, {2 * run.total_s:.1f} s on 2 cores)")
                say(f"    {run.others}")
                say(f"    {check_store(kind, store, url, topic)}")
                if run.changes != len(topic.records):
                    raise SystemExit(
                        f"check FAILED: the sink applied {run.changes:,} changes, the topic "
                        f"holds {len(topic.records):,} records"
                    )
                if profile is not None:
                    summarize_profile(profile)
                    continue
                target = TARGETS[kind]
                name = f"{kind}: {run.changes:,} changes, "
                bench.summary.append(
                    [
                        name + "'following' -> 'stopped'",
                        f">= {target:,} {unit}",
                        f"{run.own_rate:,.0f}",
                        met(run.own_rate >= target),
                    ]
                )
                bench.summary.append(
                    [
                        name + "process start -> exit",
                        f">= {target:,} {unit}",
                        f"{run.total_rate:,.0f}",
                        met(run.total_rate >= target),
                    ]
                )
        finally:
            if redis_server is not None:
                redis_server.stop()
            broker.terminate()
            broker.wait(60)


def summarize_profile(raw: Path, top: int = 16) -> None:
    """py-spy's samples of the sink, per thread, by function (inclusive and own)."""
    by_thread: dict[str, tuple[Counter[str], Counter[str]]] = {}
    totals: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        frames = stack.split(";")
        thread, functions = frames[0], [re.sub(r":\d+\)$", ")", f) for f in frames[1:]]
        inclusive, own = by_thread.setdefault(thread, (Counter(), Counter()))
        count = int(count_text)
        totals[thread] += count
        for function in set(functions):
            inclusive[function] += count
        if functions:
            own[functions[-1]] += count
    say(f"    py-spy (raw stacks in {raw}), samples by thread: " + ", ".join(
        f"{t} {c:,}" for t, c in totals.most_common()))  # fmt: skip
    thread, total = totals.most_common(1)[0]
    inclusive, own = by_thread[thread]
    for title, counter in (("inclusive", inclusive), ("own", own)):
        say(f"    {thread}, by function, {title}:")
        for function, count in counter.most_common(top):
            say(f"      {count / total:6.1%}  {function}")


# -- 2. latency -------------------------------------------------------------------------------


class ChildLog:
    """A riverbed child process, its stderr in a file."""

    def __init__(self, command: Sequence[str], log_path: Path) -> None:
        self.log_path = log_path
        with log_path.open("wb") as log:
            self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, text: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while text not in self.log():
            if self.process.poll() is not None:
                raise SystemExit(f"{self.log_path.name} exited {self.process.returncode}:\n"
                                 f"{self.log()}")  # fmt: skip
            if time.monotonic() > deadline:
                raise SystemExit(f"no {text!r} within {timeout_s} s:\n{self.log()}")
            time.sleep(0.01)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        if self.process.wait(timeout=60) != 0:
            raise SystemExit(f"{self.log_path.name} exited {self.process.returncode}:\n"
                             f"{self.log()}")  # fmt: skip


TOKEN = " rev "


class Observer(threading.Thread):
    """Notes when each token first shows in a ``products:*`` hash's ``title``: on each
    keyspace notification of an ``hset``, the time it was read off the socket (before the
    HGET that reads the token)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.seen: dict[int, float] = {}
        self.notifications = 0
        self.stop = threading.Event()
        self._reader = redis.Redis.from_url(url, decode_responses=True)
        self._pubsub = redis.Redis.from_url(url, decode_responses=True).pubsub(
            ignore_subscribe_messages=True
        )
        self._pubsub.psubscribe(f"__keyspace@0__:{TABLE}:*")
        self._pubsub.get_message(timeout=1)  # the psubscribe's answer

    def run(self) -> None:
        prefix = len("__keyspace@0__:")
        while not self.stop.is_set():
            message = self._pubsub.get_message(timeout=0.1)
            if message is None:
                continue
            at = time.monotonic()
            self.notifications += 1
            if message["data"] != "hset":
                continue
            title = self._reader.hget(message["channel"][prefix:], "title")
            if title is None or TOKEN not in title:
                continue
            token = int(title.rpartition(TOKEN)[2])
            self.seen.setdefault(token, at)
        self._pubsub.close()
        self._reader.close()


def tail_tokens(bootstrap: str, output: str, ready: Any, stop: Any) -> None:
    """In a process of its own (``--latency-split``): when each token reached a consumer of
    the CDC topic (fetch.wait.max.ms=10, as benchmarks/cdc.py's lag), as JSON in
    ``output``."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-tail", "fetch.wait.max.ms": 10}
    )
    consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    arrived: dict[int, float] = {}
    while not stop.is_set():
        message = consumer.poll(0.1)
        ready.set()
        if message is None or message.error() is not None or message.value() is None:
            continue
        at = time.monotonic()
        title = orjson.loads(message.value())["after"]["title"]
        if TOKEN in title:
            arrived.setdefault(int(title.rpartition(TOKEN)[2]), at)
    consumer.close()
    Path(output).write_bytes(orjson.dumps({str(k): v for k, v in arrived.items()}))


@dataclass
class Writer:
    """Single-row UPDATE transactions evenly paced; ``committed[i]``: when UPDATE i's commit
    returned (autocommit: one statement, one transaction)."""

    dsn: str
    rate: float
    seconds: float
    rows: int
    committed: list[float] = field(default_factory=list)
    behind_s: float = 0.0
    """The most the writer fell behind its schedule."""
    elapsed_s: float = 0.0

    def run(self) -> None:
        connection = sql(self.dsn)
        cursor = connection.cursor()
        count = int(self.rate * self.seconds)
        start = time.monotonic() + 0.05
        committed = self.committed
        for i in range(count):
            due = start + i / self.rate
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            else:
                self.behind_s = max(self.behind_s, now - due)
            n = i % self.rows
            cursor.execute(
                "UPDATE products SET title = %s, updated_at = now() WHERE product_id = %s",
                (f"Product {n}{TOKEN}{i}", f"p{n}"),
            )
            committed.append(time.monotonic())
        self.elapsed_s = committed[-1] - start
        connection.close()


def products_table(dsn: str, rows: int) -> None:
    connection = sql(dsn)
    cursor = connection.cursor()
    cursor.execute(
        "CREATE TABLE products (product_id text PRIMARY KEY, title text NOT NULL, "
        "category text NOT NULL, price_cents int NOT NULL, price numeric(10, 2) NOT NULL, "
        "updated_at timestamptz NOT NULL); "
        "INSERT INTO products SELECT 'p' || g, 'Product ' || g, "
        "(ARRAY['tops','dresses','outerwear','accessories','footwear','knitwear'])[1 + g % 6], "
        "199 + g % 40000, (199 + g % 40000) / 100.0, now() "
        f"FROM generate_series(0, {rows - 1}) g"
    )
    cursor.execute("VACUUM ANALYZE products")
    cursor.execute("CHECKPOINT")
    connection.close()


def latency(bench: Bench) -> None:
    args = bench.args
    rate, seconds = args.latency_rate, args.latency_seconds
    rows = int(rate * LATENCY_ROW_SECONDS)
    say(f"\nlatency: single-row UPDATEs at {rate:,.0f}/s for {seconds:g} s over {rows:,} rows")
    postgres = PostgresCluster.start(**PG_SETTINGS)
    redis_server = RedisServer.start()
    directory = Path(tempfile.mkdtemp(dir=bench.tmp))
    broker, bootstrap = start_broker(directory / "broker")
    children: list[ChildLog] = []
    try:
        shown = {**SERVER_SETTINGS, **PG_SETTINGS}
        shown.pop("listen_addresses", None)
        say("  PostgreSQL: " + ", ".join(f"{k}={v}" for k, v in sorted(shown.items())))
        with database(postgres) as dsn:
            products_table(dsn, rows)
            capture = ChildLog(
                [
                    *(sys.executable, "-m", "riverbed.cli.main", "cdc", "run", "--dsn", dsn),
                    *("--bootstrap", bootstrap, "--prefix", "shop", "--tables", "public.products"),
                ],
                directory / "cdc.log",
            )
            children.append(capture)
            capture.wait_for("streaming from slot")
            client = redis.Redis.from_url(redis_server.url, decode_responses=True)
            client.config_set("notify-keyspace-events", "Kh")
            sink = ChildLog(
                sink_command("redis", bootstrap, "--redis", redis_server.url),
                directory / "sink.log",
            )
            children.append(sink)
            sink.wait_for("following")
            deadline = time.monotonic() + 60
            while client.dbsize() < rows + 1:  # the snapshot's rows and the positions
                if time.monotonic() > deadline:
                    raise SystemExit(f"the snapshot did not reach Redis:\n{sink.log()}")
                time.sleep(0.05)
            tail = None
            if args.latency_split:
                context = multiprocessing.get_context("spawn")
                split_path = directory / "tail.json"
                tail_ready, tail_stop = context.Event(), context.Event()
                tail = context.Process(
                    target=tail_tokens, args=(bootstrap, str(split_path), tail_ready, tail_stop)
                )
                tail.start()
                if not tail_ready.wait(60):
                    raise SystemExit("the topic's tail did not start")
            observer = Observer(redis_server.url)
            observer.start()
            others = Others(postgres)
            used = CpuSplit(
                postgres,
                {
                    "the capture": capture.process.pid,
                    "the broker": broker.pid,
                    "the sink": sink.process.pid,
                    "redis-server": redis_server.process.pid,
                },
            )
            writer = Writer(dsn, rate, seconds, rows)
            thread = threading.Thread(target=writer.run)
            thread.start()
            thread.join()
            others_text = others.report()
            used_text = used.report()
            count = len(writer.committed)
            deadline = time.monotonic() + 30
            while len(observer.seen) < count and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)
            observer.stop.set()
            observer.join(10)
            if tail is not None:
                tail_stop.set()
                tail.join(30)
                arrived = {int(k): v for k, v in orjson.loads(split_path.read_bytes()).items()}
            client.close()
            for child in reversed(children):
                child.stop()
            children.clear()
            stopped = re.search(r"stopped: .*", sink.log())
    finally:
        for child in children:
            child.process.kill()
            child.process.wait()
        broker.terminate()
        broker.wait(60)
        redis_server.stop()
        postgres.stop()
    lags = [(observer.seen[i] - writer.committed[i]) * 1000 for i in sorted(observer.seen)]
    achieved = count / writer.elapsed_s
    p50, p95, p99 = (percentile(lags, f) for f in (0.50, 0.95, 0.99)) if lags else (0, 0, 0)
    largest = max(lags, default=0)
    say(
        f"  writer: {count:,} commits in {writer.elapsed_s:.2f} s = {achieved:,.0f}/s, at most "
        f"{writer.behind_s * 1000:.0f} ms behind its schedule"
    )
    say(
        f"  commit -> visible in Redis: {len(observer.seen):,} of {count:,} tokens seen "
        f"({observer.notifications:,} notifications); p50 {p50:.1f} ms, p95 {p95:.1f} ms, "
        f"p99 {p99:.1f} ms, max {largest:.1f} ms"
    )
    said = stopped.group(0) if stopped else "did not say it stopped"
    say(f"  the sink {said} (the snapshot's {rows:,} rows included)")
    say(f"  while the writer ran, {others_text}")
    say(f"    of them: {used_text}")
    if len(observer.seen) != count:
        raise SystemExit(f"check FAILED: {count - len(observer.seen):,} tokens never seen")
    say(f"  check passed: every one of the {count:,} tokens seen")
    bench.summary.append(
        [
            f"commit -> visible in Redis at {achieved:,.0f} changes/s (paced at {rate:,.0f}/s;"
            f" {len(observer.seen):,} of {count:,} seen): p50 / p95 / p99 / max",
            f"p95 < {LATENCY_TARGET_MS} ms",
            f"{p50:.1f} / {p95:.1f} / {p99:.1f} / {largest:.1f} ms",
            met(p95 < LATENCY_TARGET_MS),
        ]
    )
    if tail is not None:
        split(bench, writer.committed, arrived, observer.seen)


def split(
    bench: Bench, committed: list[float], arrived: dict[int, float], seen: dict[int, float]
) -> None:
    """``--latency-split``: each token's lag as commit -> in the topic (a consumer's receive
    time) and in the topic -> visible in Redis."""
    both = [i for i in sorted(seen) if i in arrived]
    parts = {
        "commit -> a consumer of the CDC topic": [(arrived[i] - committed[i]) * 1000 for i in both],
        "the consumer -> visible in Redis": [(seen[i] - arrived[i]) * 1000 for i in both],
    }
    say(f"  split, over the {len(both):,} tokens the topic's tail and Redis both saw:")
    for name, lags in parts.items():
        figures = [percentile(lags, f) for f in (0.50, 0.95, 0.99)] + [max(lags)]
        text = " / ".join(f"{v:.1f}" for v in figures) + " ms"
        say(f"    {name}: p50 / p95 / p99 / max {text}")
        bench.summary.append([f"  split: {name}: p50 / p95 / p99 / max", "—", text, "—"])


# -- the report ------------------------------------------------------------------------------


def met(ok: bool) -> str:
    return "yes" if ok else "NO"


MEASUREMENTS = (*THROUGHPUT_KINDS, "latency", "profile")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        epilog="Measurements: " + ", ".join(MEASUREMENTS) + " (see the module docstring).",
    )
    parser.add_argument("--changes", type=int, default=200_000, help="records in the topic")
    parser.add_argument("--keys", type=int, default=50_000, help="products they change")
    parser.add_argument("--latency-rate", type=float, default=2_000, help="UPDATEs/s")
    parser.add_argument("--latency-seconds", type=float, default=20)
    parser.add_argument(
        "--latency-split",
        action="store_true",
        help="also tail the CDC topic in a process of its own, to split each change's lag",
    )
    parser.add_argument("--profile-dir", type=Path, help="keep py-spy's raw stacks here")
    parser.add_argument(
        "--only", nargs="+", choices=MEASUREMENTS, default=[*THROUGHPUT_KINDS, "latency"]
    )
    args = parser.parse_args()
    say(f"machine: {machine()}")
    alone, together = cpu_speed_ms()
    say(f"machine speed: {alone:.1f} ms alone, {together:.1f} ms on every core (lower is faster)")
    tmp = Path(tempfile.mkdtemp(prefix="riverbed-bench-sinks-"))
    bench = Bench(args, tmp)
    try:
        steps: list[Callable[[], None]] = []
        kinds = [k for k in THROUGHPUT_KINDS if k in args.only]
        if kinds:
            steps.append(lambda: throughput(bench, kinds))
        if "latency" in args.only:
            steps.append(lambda: latency(bench))
        if "profile" in args.only:
            directory = args.profile_dir or tmp
            directory.mkdir(parents=True, exist_ok=True)
            steps.append(lambda: throughput(bench, THROUGHPUT_KINDS, profile_dir=directory))
        for step in steps:
            step()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say()
    alone, together = cpu_speed_ms()
    say(f"machine speed after: {alone:.1f} ms alone, {together:.1f} ms on every core")
    if bench.summary:
        say()
        print_table(["measurement", "target", "result", "met"], bench.summary)


if __name__ == "__main__":
    main()
