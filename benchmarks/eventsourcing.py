"""Event sourcing: the carts' command processor on riverbed, beside the eventsourcing library.

    .venv/bin/pip install -e '.[dev,bench-eventsourcing]'  # the library, psycopg 3, py-spy
    .venv/bin/python benchmarks/eventsourcing.py [--commands 100000] [--open-carts 5000]
        [--partitions 4] [--instances 1 2] [--latency-rate 1000] [--latency-seconds 20]
        [--library-commands 10000] [--long-cart 10000] [--at-version 5500]
        [--snapshot-every 1000] [--profile-dir DIR] [--pg-set NAME=VALUE] [--only NAME ...]

The commands are the shop's carts' (DESIGN.md, "Event sourcing"), made by
:func:`cart_commands`: ``--open-carts`` carts open at a time, each filled with AddItems and
RemoveItems, checked out (a shipping address, sealed with the user's key) after 3 to 15
events and replaced by a new cart; a few commands are refused (a product not in the cart, a
stale expected_version). The generator plays the rules itself, so each command's result and
version are known in advance and checked (:func:`check_outputs`).

Each riverbed measurement gets a ``riverbed broker`` of its own (default settings, so the
first group join waits Kafka's ``group.initial.rebalance.delay.ms``, 3 s) and runs
``riverbed es run carts --partitions N`` as child processes. Measurements (``--only``):

- ``throughput`` (target >= 20,000 commands/s): ``--commands`` commands are produced to
  shop.carts.commands (murmur2 partitioning, as Kafka's Java clients), then ``--instances``
  processors are started and timed until a read_committed consumer of shop.carts.results
  holds every result. Once per entry of ``--instances``.
- ``latency`` (target p99 < 50 ms): one processor, already assigned and warmed up; a
  producer sends ``--latency-rate`` commands/s, evenly paced, for ``--latency-seconds``;
  a read_committed consumer of the results takes, per command, the time from its produce()
  call to its result's arrival.
- ``profile``: the throughput run again (one instance) with py-spy attached from the
  processor's assignment to its last result: the main thread's wall-clock samples (idle
  included) by function and by line of processor.py, and the CPU seconds of each thread.
- ``library``: the eventsourcing library (pinned in pyproject.toml's bench-eventsourcing
  extra) with its PostgreSQL recorder, on a private cluster made durable (PG_SETTINGS,
  since the broker fsyncs every transaction): the first ``--library-commands`` commands
  as application commands (get the cart, call its method, save), with and without the
  library's aggregate cache, each result checked; then every cart read back (replay);
  then a cart of ``--long-cart`` events read whole and as of ``--at-version`` (time
  travel), without and with snapshots every ``--snapshot-every`` versions.

Every figure goes into one table (:class:`Figures`), a row per quantity and a column per
system.

- ``replay`` (target >= 200,000 events/s): the throughput run's commands decided (no
  snapshots); then, once per entry of ``--instances``, that many ``riverbed es run``
  processors of a new group rebuild every partition from the events topic, as on each
  assignment (read_committed, decoded, sealed fields opened, folded), and say how long it
  took.
- ``long_cart``: a cart of ``--long-cart`` events decided (a snapshot every
  ``--snapshot-every``), read whole and as of ``--at-version`` by the reader of ``riverbed
  es state``, without and with its latest snapshot.

Not part of the test run; results go in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import linecache
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
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from uuid import NAMESPACE_URL, UUID, uuid5

from _common import (
    PRODUCER_SETTINGS,
    CpuClock,
    cpu_speed_ms,
    machine,
    percentile,
    start_broker,
)
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

# This file has the library's name: with benchmarks/ on the path (python puts the script's
# folder first, resolved), ``import eventsourcing`` would import this file again. So, once
# _common is imported:
sys.path.remove(str(Path(__file__).resolve().parent))

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.domain import Aggregate, event

from riverbed.eventsourcing.handling import Aggregate as RiverbedCart
from riverbed.eventsourcing.messages import dumps
from riverbed.eventsourcing.reader import AggregateReader
from riverbed.eventsourcing.shop.carts import CART_TYPE, FORMAT, TOPICS
from riverbed.eventsourcing.shredding import is_sealed
from riverbed.testing.postgres import SERVER_SETTINGS, PostgresCluster, database
from riverbed.testing.topic_reader import read_to_end

RIVERBED = "riverbed"
LIBRARY = f"eventsourcing {importlib.metadata.version('eventsourcing')} (PostgreSQL)"

# The quantities, named once so that every system's figure of one lands in one row.
THROUGHPUT = "commands/s"
LATENCY = "command -> result latency at {rate:,.0f}/s: p50 / p95 / p99 / max"
REPLAY = "replay every cart, events/s"
LONG_CART = "{events:,}-event cart, current state, {snapshots}: ms"
TRAVEL = "{events:,}-event cart as of version {version:,}, {snapshots}: ms"
NO_SNAPSHOTS, SNAPSHOTS = "no snapshots", "with snapshots"

PG_SETTINGS = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
"""Over the test cluster's settings (riverbed/testing/postgres.py, which turns all three off):
PostgreSQL's defaults, so that a saved command is on disk, as a transaction the broker has
committed is (it fsyncs before answering acks=all)."""

PRODUCTS = 20  # product ids p0 .. p19
CHECKOUT_AFTER = (3, 15)  # a cart's events before its CheckOut, at least and at most
TICKS = os.sysconf("SC_CLK_TCK")  # /proc's unit of CPU time


def say(line: str = "") -> None:
    print(line, flush=True)


# -- the figures -----------------------------------------------------------------------------


@dataclass
class Figures:
    """Rows of quantities, a column per system; a target and whether it is met, if any."""

    rows: dict[str, dict[str, str]] = field(default_factory=dict)
    targets: dict[str, tuple[str, str]] = field(default_factory=dict)
    systems: list[str] = field(default_factory=list)

    def add(
        self, quantity: str, system: str, value: str, *, target: str = "", met: bool | None = None
    ) -> None:
        self.rows.setdefault(quantity, {})[system] = value
        if system not in self.systems:
            self.systems.append(system)
        if target:
            self.targets[quantity] = (target, "" if met is None else ("yes" if met else "NO"))
        say(f"  {quantity}: {value} ({system})")

    def print(self) -> None:
        headers = ["measurement", "target", *self.systems, "met"]
        lines = [
            [
                quantity,
                self.targets.get(quantity, ("", ""))[0],
                *(values.get(s, "-") for s in self.systems),
                self.targets.get(quantity, ("", ""))[1],
            ]
            for quantity, values in self.rows.items()
        ]
        widths = [max(len(c) for c in column) for column in zip(headers, *lines, strict=True)]
        for line in [headers, ["-" * w for w in widths], *lines]:
            say(
                "  ".join(
                    c.ljust(w) if i == 0 else c.rjust(w)
                    for i, (c, w) in enumerate(zip(line, widths, strict=True))
                )
            )


# -- the commands ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the contract answers to a command: accepted or not, the cart's version after."""

    accepted: bool
    version: int


@dataclass(slots=True)
class _Cart:
    cart_id: str
    user_id: str
    checkout_at: int
    items: dict[str, int] = field(default_factory=dict)
    version: int = 0


def cart_commands(
    count: int, *, open_carts: int, seed: int
) -> tuple[list[dict[str, Any]], dict[str, Outcome]]:
    """``count`` command documents over ``open_carts`` carts open at a time (see the module
    docstring), and each command's outcome under the contract's rules."""
    rng = random.Random(seed)
    made = 0

    def new_cart() -> _Cart:
        nonlocal made
        made += 1
        return _Cart(
            f"cart-{seed}-{made}", f"user-{made % open_carts}", rng.randint(*CHECKOUT_AFTER)
        )

    carts = [new_cart() for _ in range(open_carts)]
    documents: list[dict[str, Any]] = []
    outcomes: dict[str, Outcome] = {}
    ts = int(time.time() * 1000)
    for n in range(count):
        slot = rng.randrange(open_carts)
        cart = carts[slot]
        accepted = True
        data: dict[str, Any]
        if cart.version >= cart.checkout_at and cart.items:
            kind, data = "CheckOut", {"shipping_address": f"{n} Long Road, Springfield"}
        elif cart.items and rng.random() < 0.3:
            product = rng.choice(sorted(cart.items)) if rng.random() < 0.9 else "p-none"
            kind, data = "RemoveItem", {"product_id": product}
            accepted = product in cart.items
        else:
            product = f"p{rng.randrange(PRODUCTS)}"
            kind, data = "AddItem", {"product_id": product, "quantity": rng.randint(1, 3)}
        expected: int | None = None
        draw = rng.random()
        if draw < 0.2:
            expected = cart.version  # a careful client
        elif draw < 0.21:
            expected, accepted = cart.version + 1, False  # a stale one: version_conflict
        command_id = f"cmd-{seed}-{n}"
        documents.append(
            {
                "command_id": command_id,
                "type": kind,
                "cart_id": cart.cart_id,
                "user_id": cart.user_id,
                "expected_version": expected,
                "data": data,
                "ts": ts + n,
            }
        )
        if accepted:
            cart.version += 1
            if kind == "AddItem":
                cart.items[product] = cart.items.get(product, 0) + data["quantity"]
            elif kind == "RemoveItem":
                del cart.items[product]
        outcomes[command_id] = Outcome(accepted, cart.version)
        if accepted and kind == "CheckOut":
            carts[slot] = new_cart()
    return documents, outcomes


def check_outputs(bootstrap: str, outcomes: dict[str, Outcome]) -> str:
    """The contract's guarantees over the events and results topics, against the expected
    ``outcomes``: every command answered exactly once, as expected; per cart, versions 1, 2,
    3 ... in log order; one event per accepted command; shipping addresses sealed. Raises
    SystemExit naming the first failure; a line of what it checked."""
    answers = Counter[str]()
    for record in read_to_end(bootstrap, TOPICS.results, timeout_s=120):
        result = FORMAT.decode_result(record.value)
        answers[result.command_id] += 1
        want = outcomes.get(result.command_id)
        if want is None or (result.accepted, result.version) != (want.accepted, want.version):
            raise SystemExit(f"unexpected result {result} (expected {want})")
    if set(answers) != set(outcomes) or max(answers.values()) != 1:
        missing = len(set(outcomes) - set(answers))
        raise SystemExit(
            f"{missing} commands unanswered; answered twice: "
            f"{[c for c, n in answers.items() if n > 1][:5]}"
        )
    versions: dict[str, int] = defaultdict(int)
    by_command = Counter[str]()
    sealed = 0
    for record in read_to_end(bootstrap, TOPICS.events, timeout_s=120):
        e = FORMAT.decode_event(record.value)
        if e.version != versions[e.aggregate_id] + 1:
            raise SystemExit(
                f"{e.aggregate_id}: version {e.version} after {versions[e.aggregate_id]}"
            )
        versions[e.aggregate_id] = e.version
        by_command[e.command_id] += 1
        if e.type == "CheckedOut":
            if not is_sealed(e.data.get("shipping_address")):
                raise SystemExit(f"{e.event_id}: shipping_address not sealed")
            sealed += 1
    accepted = {c for c, o in outcomes.items() if o.accepted}
    if set(by_command) != accepted or max(by_command.values()) != 1:
        raise SystemExit("the events are not one per accepted command")
    return (
        f"checked: {len(answers):,} commands answered once as expected, "
        f"{sum(by_command.values()):,} events in {len(versions):,} carts with dense "
        f"versions, {sealed:,} sealed addresses"
    )


# -- riverbed: the broker, the processors, the results ---------------------------------------


@dataclass
class Bench:
    args: argparse.Namespace
    tmp: Path
    figures: Figures
    postgres: PostgresCluster | None = None

    @contextlib.contextmanager
    def broker(self) -> Iterator[tuple[int, str]]:
        """A new ``riverbed broker`` (its pid and bootstrap), the commands topic created."""
        process, bootstrap = start_broker(self.tmp / f"broker-{time.monotonic_ns()}")
        try:
            create_topic(bootstrap, TOPICS.commands, self.args.partitions)
            yield process.pid, bootstrap
        finally:
            process.terminate()
            process.wait(60)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=partitions, replication_factor=1)
    for future in admin.create_topics([new]).values():
        future.result(30)


@dataclass
class Processor:
    """``riverbed es run carts`` as a child process, its stderr in a file."""

    process: subprocess.Popen[bytes]
    log_path: Path
    cpu: CpuClock

    @classmethod
    def start(
        cls,
        bench: Bench,
        bootstrap: str,
        instance: int,
        *,
        snapshot_every: int = 100,
        group: str | None = None,
    ) -> Processor:
        log_path = bench.tmp / f"es-{instance}-{time.monotonic_ns()}.log"
        command = [
            sys.executable,
            "-m",
            "riverbed.cli.main",
            "es",
            "run",
            "carts",
            "--bootstrap",
            bootstrap,
            "--instance",
            str(instance),
            "--partitions",
            str(bench.args.partitions),
            "--snapshot-every",
            str(snapshot_every),
            *(["--group", group] if group else []),
        ]
        with log_path.open("wb") as log:
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
        return cls(process, log_path, CpuClock(process.pid))

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not re.search(pattern, self.log()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"no {pattern!r} from the processor:\n{self.log()}")
            time.sleep(0.01)

    def stop(self) -> str:
        """SIGTERM; its last log line ("stopped: N accepted, ...")."""
        self.process.send_signal(signal.SIGTERM)
        if self.process.wait(60) != 0:
            raise SystemExit(f"the processor exited {self.process.returncode}:\n{self.log()}")
        return self.log().strip().splitlines()[-1]


class ResultTail(threading.Thread):
    """Reads shop.carts.results read_committed from its beginning (once the processor has
    made it) while the processor writes it: the arrival time of each result, by command id.
    ``exact``: poll() one at a time (for latency), else consume() in batches, which holds a
    result back up to 5 ms."""

    def __init__(self, bootstrap: str, *, exact: bool) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.exact = bootstrap, exact
        self.arrived: dict[bytes | None, float] = {}
        self.first = 0.0
        self.last = 0.0
        self._stopping = threading.Event()
        self.start()

    def run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "bench-tail",
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 100,
                "enable.auto.commit": False,
            }
        )
        try:
            while not self._stopping.is_set():
                topics = consumer.list_topics(timeout=10).topics
                if TOPICS.results in topics:
                    count = len(topics[TOPICS.results].partitions)
                    break
                time.sleep(0.05)
            else:
                return
            consumer.assign(
                [TopicPartition(TOPICS.results, p, OFFSET_BEGINNING) for p in range(count)]
            )
            arrived = self.arrived
            while not self._stopping.is_set():
                if self.exact:
                    one = consumer.poll(0.05)
                    messages = [] if one is None else [one]
                else:
                    messages = consumer.consume(num_messages=10_000, timeout=0.005)
                now = time.monotonic()
                for message in messages:
                    if message.error() is None:
                        self.first = self.first or now
                        self.last = now
                        arrived.setdefault(message.key(), now)
        finally:
            consumer.close()

    def wait(self, count: int, processors: Sequence[Processor], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.arrived) < count:
            for p in processors:
                if p.process.poll() is not None:
                    raise SystemExit(f"the processor exited:\n{p.log()}")
            if time.monotonic() > deadline:
                raise SystemExit(f"{len(self.arrived):,} of {count:,} results after {timeout_s} s")
            time.sleep(0.005)

    def stop(self) -> None:
        self._stopping.set()
        self.join(30)


def send(bootstrap: str, documents: Sequence[dict[str, Any]]) -> None:
    """Produce ``documents`` to the commands topic, partitioned as Kafka's Java clients do."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "partitioner": "murmur2_random",
            "acks": "all",
            **PRODUCER_SETTINGS,
        }
    )
    for i, document in enumerate(documents):
        producer.produce(
            TOPICS.commands,
            key=FORMAT.key(document["cart_id"]),
            value=json.dumps(document).encode(),
        )
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise SystemExit("commands not delivered")


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds of a process's threads by kind: its main (Python) thread, librdkafka's
    (named rdk:main, rdk:broker... by librdkafka), others, and threads that have ended (the
    process's total less its live threads')."""

    def used(stat: Path) -> float:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (proc(5))

    totals: dict[str, float] = defaultdict(float)
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            name = (task / "comm").read_text().strip()
            if task.name == str(pid):
                name = "Python main thread"
            elif name.startswith("rdk:broker"):
                name = "rdk:broker (per broker connection)"
            totals[name] += used(task / "stat")
    totals["ended threads"] = used(Path(f"/proc/{pid}/stat")) - sum(totals.values())
    return totals


def machine_busy_seconds() -> float:
    """CPU seconds all cores have been busy since boot (/proc/stat: not idle, not iowait)."""
    user, nice, system, _, _, irq, softirq, steal = map(
        int, Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    )
    return (user + nice + system + irq + softirq + steal) / TICKS


class CpuUse:
    """CPU seconds from now on: the processors', the broker's, this process's, and what
    the rest of the machine used meanwhile (other people's work on a shared machine)."""

    def __init__(self, broker_pid: int) -> None:
        self._broker = CpuClock(broker_pid)
        self._machine = machine_busy_seconds()
        self._me = sum(os.times()[:2])

    def report(self, processors: Sequence[Processor], seconds: float) -> str:
        """While the processors still run; ``seconds``: the measurement's length."""
        used = [p.cpu.lap() for p in processors]
        broker = self._broker.lap()
        me = sum(os.times()[:2]) - self._me
        rest = machine_busy_seconds() - self._machine - sum(used) - broker - me
        return (
            f"CPU in {seconds:.1f} s ({2 * seconds:.1f} s on 2 cores): processors "
            f"{' + '.join(f'{u:.1f}' for u in used)} s, broker {broker:.1f} s, this "
            f"benchmark {me:.1f} s, other processes {max(rest, 0):.1f} s"
        )


def py_spy(pid: int, output: Path) -> subprocess.Popen[bytes]:
    """py-spy recording ``pid``'s Python threads, wall clock (idle samples included), 250
    samples a second, without pausing it (--nonblocking), until SIGINT."""
    command = [
        *(str(Path(sys.executable).parent / "py-spy"), "record", "--nonblocking", "--idle"),
        *("--format", "raw", "--rate", "250", "-o", str(output), "--pid", str(pid)),
    ]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


# -- 1. throughput and the profile ------------------------------------------------------------


def throughput_run(
    bench: Bench, instances: int, *, profile: Path | None = None
) -> tuple[float, float]:
    """One timed run (see the module docstring): commands/s from the processors' start, and
    from the first result to the last."""
    args = bench.args
    documents, outcomes = cart_commands(args.commands, open_carts=args.open_carts, seed=1)
    with bench.broker() as (broker_pid, bootstrap):
        started = time.monotonic()
        send(bootstrap, documents)
        say(f"  {len(documents):,} commands produced in {time.monotonic() - started:.1f} s")
        tail = ResultTail(bootstrap, exact=False)
        cpu = CpuUse(broker_pid)
        started = time.monotonic()
        processors = [Processor.start(bench, bootstrap, n + 1) for n in range(instances)]
        spy = None
        if profile is not None:
            processors[0].wait_for("assigned")
            spy = py_spy(processors[0].process.pid, profile)
        tail.wait(len(documents), processors, timeout_s=max(120, len(documents) / 500))
        ended = tail.last
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            _, errors = spy.communicate(timeout=60)
            if spy.returncode != 0 or not profile or not profile.exists():
                raise SystemExit(f"py-spy failed: {errors.decode()}")
        seconds, busy = ended - started, ended - tail.first
        used = cpu.report(processors, seconds)
        threads = [thread_cpu_seconds(p.process.pid) for p in processors]
        tail.stop()
        for p in processors:
            say(f"  processor {p.stop()}")
        say(f"  start to first result {tail.first - started:.1f} s, then {busy:.1f} s to the last")
        say(f"  {used}")
        for n, split in enumerate(threads, 1):
            ordered = sorted(split.items(), key=lambda kv: -kv[1])
            say(f"  processor {n}'s threads: " + ", ".join(f"{k} {v:.1f} s" for k, v in ordered))
        say("  " + check_outputs(bootstrap, outcomes))
    return len(documents) / seconds, len(documents) / busy


def throughput(bench: Bench) -> None:
    for instances in bench.args.instances:
        say(
            f"\nthroughput: {bench.args.commands:,} commands, {instances} processor(s), "
            f"{bench.args.partitions} partitions"
        )
        from_start, busy = throughput_run(bench, instances)
        bench.figures.add(
            f"{THROUGHPUT}, exactly-once, {instances} processor(s): from start; first to "
            "last result",
            RIVERBED,
            f"{from_start:,.0f}; {busy:,.0f}",
            target=">= 20,000",
            met=busy >= 20_000,
        )


def profile(bench: Bench) -> None:
    directory = bench.args.profile_dir or bench.tmp
    directory.mkdir(parents=True, exist_ok=True)
    raw = directory / "processor.pyspy.txt"
    say(f"\nprofile: the throughput run with py-spy (raw stacks in {raw})")
    _, busy = throughput_run(bench, 1, profile=raw)
    say(f"  {busy:,.0f} commands/s under py-spy, first to last result")
    summarize_profile(raw)


def summarize_profile(raw: Path, top: int = 14) -> None:
    """The main thread's samples by function (inclusive and own) and by the deepest line of
    processor.py on the stack, as shares of all samples."""
    inclusive, own, lines = Counter[str](), Counter[str](), Counter[str]()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        count = int(count_text)
        frames = stack.split(";")
        total += count
        functions = [re.sub(r":\d+\)$", ")", f) for f in frames]
        for function in set(functions):
            inclusive[function] += count
        own[functions[-1]] += count
        mine = [f for f in frames if "eventsourcing/processor.py:" in f]
        if mine:
            lines[mine[-1]] += count
    say(f"  {total:,} samples of the main thread (wall clock, idle included)")
    for title, counter in (("inclusive", inclusive), ("own", own)):
        say(f"  by function, {title}:")
        for function, count in counter.most_common(top):
            say(f"    {count / total:6.1%}  {function}")
    say("  by the deepest line of processor.py:")
    for frame, count in lines.most_common(top):
        match = re.search(r"\((.*):(\d+)\)$", frame)
        source = ""
        if match:
            path = Path(match.group(1))
            if not path.is_absolute():
                path = (
                    Path(__file__).resolve().parent.parent
                    / "riverbed"
                    / "eventsourcing"
                    / "processor.py"
                )
            source = linecache.getline(str(path), int(match.group(2))).strip()
        say(f"    {count / total:6.1%}  {frame}  {source}")


# -- 2. latency ------------------------------------------------------------------------------


def latency(bench: Bench) -> None:
    args = bench.args
    count = int(args.latency_rate * args.latency_seconds)
    warm_up = 500
    documents, outcomes = cart_commands(warm_up + count, open_carts=args.open_carts, seed=2)
    keys = [FORMAT.key(d["cart_id"]) for d in documents]
    values = [json.dumps(d).encode() for d in documents]
    results = [dumps({"command_id": d["command_id"]}) for d in documents]  # the results' keys
    say(f"\nlatency: {count:,} commands at {args.latency_rate:,.0f}/s, one processor")
    with bench.broker() as (_, bootstrap):
        processor = Processor.start(bench, bootstrap, 1)
        processor.wait_for("assigned")
        tail = ResultTail(bootstrap, exact=True)
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "partitioner": "murmur2_random",
                "acks": "all",
                "linger.ms": 0,
            }
        )
        for key, value in zip(keys[:warm_up], values[:warm_up], strict=True):
            producer.produce(TOPICS.commands, key=key, value=value)
        producer.flush(30)
        tail.wait(warm_up, [processor], timeout_s=60)
        sent_at: list[float] = []
        start = time.monotonic() + 0.1
        for i in range(warm_up, warm_up + count):
            delay = start + (i - warm_up) / args.latency_rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            sent_at.append(time.monotonic())
            producer.produce(TOPICS.commands, key=keys[i], value=values[i])
            producer.poll(0)
        achieved = count / (time.monotonic() - start)
        producer.flush(30)
        tail.wait(warm_up + count, [processor], timeout_s=60)
        tail.stop()
        say(f"  processor {processor.stop()}")
        waits_ms = [(tail.arrived[results[warm_up + n]] - t) * 1000 for n, t in enumerate(sent_at)]
        say("  " + check_outputs(bootstrap, outcomes))
    p = {q: percentile(waits_ms, q / 100) for q in (50, 95, 99)}
    bench.figures.add(
        LATENCY.format(rate=achieved),
        RIVERBED,
        f"{p[50]:.0f} / {p[95]:.0f} / {p[99]:.0f} / {max(waits_ms):.0f} ms",
        target="p99 < 50 ms",
        met=p[99] < 50,
    )


# -- 3. the eventsourcing library --------------------------------------------------------------


class Refused(Exception):
    """A command the cart refuses (the library's way: the command method raises)."""


class LibraryCart(Aggregate):
    """The shop's cart as the library's aggregate: command methods check the rules, the
    @event methods (which replay runs) change the state. The library's first event creates
    the cart, so its versions are the contract's plus one."""

    def __init__(self, cart_id: str, user_id: str) -> None:
        self.cart_id, self.user_id = cart_id, user_id
        self.items: dict[str, int] = {}
        self.checked_out = False
        self.shipping_address: str | None = None

    @staticmethod
    def create_id(cart_id: str) -> UUID:
        return uuid5(NAMESPACE_URL, f"/carts/{cart_id}")

    def add_item(self, product_id: str, quantity: int) -> None:
        if self.checked_out:
            raise Refused("checked_out")
        self.item_added(product_id, quantity)

    def remove_item(self, product_id: str) -> None:
        if self.checked_out:
            raise Refused("checked_out")
        if product_id not in self.items:
            raise Refused("no_such_item")
        self.item_removed(product_id)

    def check_out(self, shipping_address: str) -> None:
        if self.checked_out:
            raise Refused("checked_out")
        if not self.items:
            raise Refused("empty_cart")
        self.checked_out_event(shipping_address)

    @event("ItemAdded")
    def item_added(self, product_id: str, quantity: int) -> None:
        self.items[product_id] = self.items.get(product_id, 0) + quantity

    @event("ItemRemoved")
    def item_removed(self, product_id: str) -> None:
        del self.items[product_id]

    @event("CheckedOut")
    def checked_out_event(self, shipping_address: str) -> None:
        self.checked_out, self.shipping_address = True, shipping_address


class LibraryCarts(Application[UUID]):
    """The carts' application: one command, one get and at most one save."""

    def handle(self, document: dict[str, Any]) -> Outcome:
        cart_id = LibraryCart.create_id(document["cart_id"])
        try:
            cart: LibraryCart = self.repository.get(cart_id)
            version = cart.version - 1
        except AggregateNotFoundError:
            cart = LibraryCart(cart_id=document["cart_id"], user_id=document["user_id"])
            version = 0
        expected = document["expected_version"]
        if expected is not None and expected != version:
            return Outcome(False, version)
        data = document["data"]
        try:
            match document["type"]:
                case "AddItem":
                    cart.add_item(data["product_id"], data["quantity"])
                case "RemoveItem":
                    cart.remove_item(data["product_id"])
                case "CheckOut":
                    cart.check_out(data["shipping_address"])
        except Refused:
            return Outcome(False, version)
        self.save(cart)
        return Outcome(True, cart.version - 1)


def library_env(dsn: str, **settings: str) -> dict[str, str]:
    url = urlsplit(dsn)
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": url.path.lstrip("/"),
        "POSTGRES_HOST": url.hostname or "127.0.0.1",
        "POSTGRES_PORT": str(url.port),
        "POSTGRES_USER": url.username or "postgres",
        "POSTGRES_PASSWORD": "trust",  # the cluster trusts local connections
        **settings,
    }


def timed(run: Callable[[], object], repeat: int = 5) -> float:
    """The median seconds of ``repeat`` calls, after one not counted (a warm cache)."""
    run()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def library(bench: Bench) -> None:
    args = bench.args
    if bench.postgres is None:
        bench.postgres = PostgresCluster.start(**pg_settings(args))
    documents, outcomes = cart_commands(args.library_commands, open_carts=args.open_carts, seed=1)
    say(f"\nlibrary: {LIBRARY}, {len(documents):,} commands")
    configurations = {
        "no aggregate cache (the default)": {},
        # A single writer, as riverbed's processor is: no need to read newer events first.
        "aggregate cache, no fast-forward": {
            "AGGREGATE_CACHE_MAXSIZE": str(2 * args.open_carts),
            "AGGREGATE_CACHE_FASTFORWARD": "n",
        },
    }
    for name, settings in configurations.items():
        with database(bench.postgres) as dsn:
            app = LibraryCarts(env=library_env(dsn, **settings))
            started = time.perf_counter()
            for document in documents:
                got = app.handle(document)
                if got != outcomes[document["command_id"]]:
                    raise SystemExit(
                        f"{document}: {got}, expected {outcomes[document['command_id']]}"
                    )
            seconds = time.perf_counter() - started
            stored = app.recorder.max_notification_id() or 0
            bench.figures.add(
                f"{THROUGHPUT}, one process, {name}", LIBRARY, f"{len(documents) / seconds:,.0f}"
            )
            say(f"  {stored:,} events stored in {seconds:.1f} s, every result as expected")
            if settings:
                continue
            saved = [d for d in documents if outcomes[d["command_id"]].accepted]
            carts = sorted({LibraryCart.create_id(d["cart_id"]) for d in saved})
            reader = LibraryCarts(env=library_env(dsn))
            started = time.perf_counter()
            for cart_id in carts:
                reader.repository.get(cart_id)
            seconds = time.perf_counter() - started
            bench.figures.add(REPLAY, LIBRARY, f"{stored / seconds:,.0f}")
            say(f"  {len(carts):,} carts ({stored:,} events) read in {seconds:.2f} s, one get each")
            app.close()
            reader.close()
    long_cart(bench)


def long_cart(bench: Bench) -> None:
    """The library's long cart: its creation and ``--long-cart`` - 1 ItemAdded (saved at
    once), read whole and as of ``--at-version`` (the contract's count: the library's
    version is one more), without and with a snapshot every ``--snapshot-every`` versions;
    the median of 5 reads after one not counted."""
    args = bench.args
    assert bench.postgres is not None
    events, version = args.long_cart, args.at_version
    with database(bench.postgres) as dsn:
        app = LibraryCarts(env=library_env(dsn))
        cart = LibraryCart(cart_id="long-cart", user_id="user-long")
        for n in range(events - 1):
            cart.add_item(f"p{n % PRODUCTS}", 1)
        app.save(cart)
        snapshots = LibraryCarts(env=library_env(dsn, IS_SNAPSHOTTING_ENABLED="y"))
        for at in range(args.snapshot_every, events + 1, args.snapshot_every):
            snapshots.take_snapshot(cart.id, version=at)
        say(f"  the {events:,}-event cart; {SNAPSHOTS}: one every {args.snapshot_every:,} versions")
        for name, reader in (
            (NO_SNAPSHOTS, app),
            (SNAPSHOTS, snapshots),
        ):
            whole = timed(partial(reader.repository.get, cart.id))
            as_of = timed(partial(reader.repository.get, cart.id, version=version + 1))
            rate = f" ({events / whole:,.0f} events/s)" if reader is app else ""
            bench.figures.add(
                LONG_CART.format(events=events, snapshots=name),
                LIBRARY,
                f"{whole * 1000:.1f}{rate}",
            )
            bench.figures.add(
                TRAVEL.format(events=events, version=version, snapshots=name),
                LIBRARY,
                f"{as_of * 1000:.1f}",
            )
        app.close()
        snapshots.close()


# -- 4. riverbed's replay and time travel ------------------------------------------------------


def decided(
    bench: Bench, bootstrap: str, documents: Sequence[dict[str, Any]], snapshot_every: int
) -> None:
    """``documents`` sent and decided by one processor (snapshots every ``snapshot_every``
    events of a cart), which is then stopped."""
    send(bootstrap, documents)
    tail = ResultTail(bootstrap, exact=False)
    processor = Processor.start(bench, bootstrap, 1, snapshot_every=snapshot_every)
    tail.wait(len(documents), [processor], timeout_s=max(120, len(documents) / 500))
    tail.stop()
    say(f"  processor {processor.stop()}")


RESTORED = re.compile(
    r"assigned \S+ partitions \[([\d, ]*)\]: restored [\d,]+ aggregates from [\d,]+ snapshots "
    r"and ([\d,]+) events in ([\d.]+) s \([\d,]+/s\), [\d,]+ results in ([\d.]+) s"
)


def replay(bench: Bench) -> None:
    """The throughput run's commands decided (no snapshots); then, once with each entry of
    ``--instances``, that many new processors of a new group (its offsets committed at the
    commands' end, so they only restore) rebuild their partitions from the events topic, as
    on every assignment: read_committed, decoded, sealed fields opened, folded. Each says
    how many events it read and in how long; with several, the figure is all their events
    over the span from the first one's start to the end of the last one's events (each
    then reads its partitions' results, which are not replay). The median of 3 runs after
    one not counted."""
    args = bench.args
    documents, _ = cart_commands(args.commands, open_carts=args.open_carts, seed=1)
    say(f"\nreplay: the events of {len(documents):,} commands")
    with bench.broker() as (_, bootstrap):
        decided(bench, bootstrap, documents, snapshot_every=0)
        for instances in args.instances:
            rates = [
                events / seconds
                for events, seconds in (
                    restore_run(bench, bootstrap, instances, f"{instances}-{n}") for n in range(4)
                )
            ][1:]  # the first not counted
            rate = statistics.median(rates)
            bench.figures.add(
                f"{REPLAY}, {instances} processor(s) restoring {args.partitions} partitions "
                "(median of 3)",
                RIVERBED,
                f"{rate:,.0f} ({', '.join(f'{r:,.0f}' for r in rates)})",
                target=">= 200,000",
                met=rate >= 200_000,
            )


def restore_run(bench: Bench, bootstrap: str, instances: int, name: str) -> tuple[int, float]:
    """``instances`` processors of a new group restore every partition: (events, seconds)."""
    group = f"bench-restore-{name}"
    commit_at_end(bootstrap, group, TOPICS.commands, bench.args.partitions)
    processors = [
        Processor.start(bench, bootstrap, n + 1, snapshot_every=0, group=group)
        for n in range(instances)
    ]
    restored: dict[int, tuple[set[int], int, float, float]] = {}
    deadline = time.monotonic() + 120
    try:
        while True:
            for n, processor in enumerate(processors):
                found = RESTORED.findall(processor.log())
                if found and (n not in restored or restored[n][0] != _numbers(found[-1][0])):
                    partitions, events, seconds, results_s = found[-1]
                    # its events' end: the line comes once its results are read too
                    restored[n] = (_numbers(partitions), _count(events), float(seconds),
                                   time.monotonic() - float(results_s))  # fmt: skip
                if processor.process.poll() is not None:
                    raise SystemExit(f"the processor exited:\n{processor.log()}")
            owned = [restored[n][0] for n in restored]
            if len(restored) == instances and sorted(p for o in owned for p in o) == list(
                range(bench.args.partitions)
            ):
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"no restore by every processor: {restored}")
            time.sleep(0.005)
    finally:
        for processor in processors:
            processor.stop()
    events = sum(r[1] for r in restored.values())
    start = min(seen - seconds for _, _, seconds, seen in restored.values())
    end = max(seen for *_, seen in restored.values())
    say(
        f"  {instances} processor(s): "
        + "; ".join(f"{sorted(p)}: {e:,} events in {s:.3f} s" for p, e, s, _ in restored.values())
        + f"; together {events:,} in {end - start:.3f} s"
    )
    return events, end - start


def _numbers(text: str) -> set[int]:
    return {int(n) for n in text.split(",") if n.strip()}


def _count(text: str) -> int:
    return int(text.replace(",", ""))


def commit_at_end(bootstrap: str, group: str, topic: str, partitions: int) -> None:
    """Commit ``group``'s offsets of ``topic`` at its end (a processor of that group then has
    no command left to decide)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        ends = [
            TopicPartition(topic, p, consumer.get_watermark_offsets(TopicPartition(topic, p))[1])
            for p in range(partitions)
        ]
        consumer.commit(offsets=ends, asynchronous=False)
    finally:
        consumer.close()


def long_cart_riverbed(bench: Bench) -> None:
    """A cart of ``--long-cart`` AddItems decided by the processor (a snapshot every
    ``--snapshot-every`` events), read whole and as of ``--at-version``, without and with its
    snapshot, each read with a new reader as ``riverbed es state`` makes one (one consumer:
    the topics' metadata, the key topic, the snapshot's partition, the events after it); the
    median of 5 reads after one not counted."""
    args = bench.args
    events, version = args.long_cart, args.at_version
    documents = [
        {"command_id": f"long-{n}", "type": "AddItem", "cart_id": "long-cart",
         "user_id": "user-long", "expected_version": None,
         "data": {"product_id": f"p{n % PRODUCTS}", "quantity": 1}, "ts": n}
        for n in range(events)
    ]  # fmt: skip
    say(f"\nlong cart (riverbed): {events:,} events, a snapshot every {args.snapshot_every:,}")
    with bench.broker() as (_, bootstrap):
        decided(bench, bootstrap, documents, snapshot_every=args.snapshot_every)

        def state(**options: Any) -> RiverbedCart[Any]:
            """As ``riverbed es state`` reads: a new reader (and consumer) each time."""
            with AggregateReader(CART_TYPE, bootstrap) as reader:
                return reader.state_of("long-cart", **options)

        with AggregateReader(CART_TYPE, bootstrap) as reader:
            snapshot = reader.snapshot_of("long-cart")
        say(f"  its latest snapshot: version {snapshot.aggregate.version if snapshot else None}")
        for name, snapshots in ((NO_SNAPSHOTS, False), (SNAPSHOTS, True)):
            whole = timed(partial(state, snapshots=snapshots))
            as_of = timed(partial(state, at_version=version, snapshots=snapshots))
            if state(snapshots=snapshots).version != events:
                raise SystemExit("the long cart does not have all its events")
            rate = "" if snapshots else f" ({events / whole:,.0f} events/s)"
            bench.figures.add(
                LONG_CART.format(events=events, snapshots=name), RIVERBED,
                f"{whole * 1000:.1f}{rate}",
            )  # fmt: skip
            bench.figures.add(
                TRAVEL.format(events=events, version=version, snapshots=name), RIVERBED,
                f"{as_of * 1000:.1f}",
            )  # fmt: skip


# -- main --------------------------------------------------------------------------------------


MEASUREMENTS: dict[str, Callable[[Bench], None]] = {
    "throughput": throughput,
    "latency": latency,
    "profile": profile,
    "library": library,
    "replay": replay,
    "long_cart": long_cart_riverbed,
}
"""Each adds its figures to ``bench.figures``; ``--only`` picks some, in this order."""


def pg_settings(args: argparse.Namespace) -> dict[str, str]:
    settings = dict(PG_SETTINGS)
    for item in args.pg_set:
        name, _, value = item.partition("=")
        settings[name] = value
    return settings


def source_state() -> str:
    """The commit measured, and the files of the processor's packages changed beside it (the
    benchmark runs the working tree)."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True).stdout

    changed = git("status", "--porcelain", "riverbed/eventsourcing", "riverbed/client").split("\n")
    changed = [line[3:] for line in changed if line.strip()]
    return f"commit {git('rev-parse', '--short', 'HEAD').strip()}" + (
        f", with uncommitted changes to {', '.join(changed)}" if changed else ""
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        epilog="Measurements: " + ", ".join(MEASUREMENTS) + " (see the module docstring).",
    )
    parser.add_argument("--commands", type=int, default=100_000, help="throughput run's")
    parser.add_argument("--open-carts", type=int, default=5_000, help="carts open at a time")
    parser.add_argument("--partitions", type=int, default=4, help="of the carts' topics")
    parser.add_argument(
        "--instances",
        type=int,
        nargs="+",
        default=[1, 2],
        help="processors in a throughput run (one run per value)",
    )
    parser.add_argument("--latency-rate", type=float, default=1_000, help="commands/s")
    parser.add_argument("--latency-seconds", type=float, default=20)
    parser.add_argument("--library-commands", type=int, default=10_000)
    parser.add_argument("--long-cart", type=int, default=10_000, help="its events")
    parser.add_argument(
        "--at-version", type=int, default=5_500, help="time travel to this version of the long cart"
    )
    parser.add_argument("--snapshot-every", type=int, default=1_000, help="events")
    parser.add_argument("--profile-dir", type=Path, help="keep py-spy's raw stacks here")
    parser.add_argument(
        "--pg-set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a PostgreSQL setting over PG_SETTINGS (repeatable)",
    )
    parser.add_argument("--only", nargs="+", choices=MEASUREMENTS, default=list(MEASUREMENTS))
    args = parser.parse_args()
    say(f"machine: {machine()}")
    say(f"riverbed: {source_state()}")
    alone, together = cpu_speed_ms()
    say(f"machine speed: {alone:.1f} ms alone, {together:.1f} ms on every core (lower is faster)")
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(args, Path(tmp), Figures())
        try:
            for name in MEASUREMENTS:
                if name in args.only:
                    MEASUREMENTS[name](bench)
        finally:
            if bench.postgres is not None:
                shown = {**SERVER_SETTINGS, **pg_settings(args)}
                say(
                    "\nPostgreSQL for the library: "
                    + ", ".join(
                        f"{k}={v}" for k, v in sorted(shown.items()) if k != "listen_addresses"
                    )
                )
                bench.postgres.stop()
    say()
    alone, together = cpu_speed_ms()
    say(f"machine speed after: {alone:.1f} ms alone, {together:.1f} ms on every core")
    bench.figures.print()


if __name__ == "__main__":
    main()
