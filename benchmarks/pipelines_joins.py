"""The join and CEP pipelines on local[2]: sustained throughput and state size.

    .venv/bin/python benchmarks/pipelines_joins.py [--events 1000000] [--max-offsets 100000]
        [--warmup-events 20000] [--only search_ctr enriched_clicks category_sales fraud_alerts]
        [--quick] [--conf KEY=VALUE ...]

``--quick`` is a smoke run (50,000 input records per pipeline from a small shop, 10,000 per
micro-batch; about 5 minutes). The full run takes about 25 minutes, 3 of them generating
the inputs.

Starts one local[2] SparkSession (before any clock runs) and, per pipeline, a ``riverbed
broker`` process of its own holding only that pipeline's inputs. For each of
``search_ctr``, ``enriched_clicks``, ``category_sales`` and ``fraud_alerts``
(``PIPELINES[name].build``, built as ``riverbed pipeline run`` builds it: one riverbed
source subscribed to the pipeline's inputs from the earliest offsets, the riverbed sink with
a checkpoint, append mode):

1. **Throughput.** ``--events`` input records are produced (4 partitions per topic, keyed,
   Kafka's default partitioner), then the query reads them all with ``Trigger.AvailableNow``
   and ``maxOffsetsPerTrigger`` (several micro-batches). events/s = input records / the
   wall time from the query's start to its end. Per batch: its records / its
   ``triggerExecution`` time. Records are counted from the batches' offsets: Spark's
   ``numInputRows`` (and so ``processedRowsPerSecond``, printed too) counts a record once
   per scan of the source, and a pipeline that takes two topics from its one source (a
   union of two filters) scans it twice. Printed too: per batch, rows, duration, watermark
   and state rows; the CPU seconds of the JVM, the Python workers and the broker. Before
   it, a warm-up run of the same pipeline (``--warmup-events`` records of a small shop,
   :data:`WARMUP_SHOP`, on a broker of its own; printed, not counted) starts the Python
   workers and imports the pipeline's code: the measured run is a warm session's.
2. **State size after those input events**, from the same run: per stateful operator
   (``state/<id>`` is the progress report's ``stateOperators[id]``), the last progress
   report's ``numRowsTotal``, ``memoryUsedBytes`` and some of RocksDB's custom metrics;
   the rows of each state variable and the registered timers, read afterwards with Spark's
   state data source (``statestore``), with their size as JSON; the bytes on disk of the
   checkpoint's ``state/<id>`` directory (RocksDB changelog checkpointing: the changelog
   files of every batch plus the snapshots maintenance has made, more than the live state).

**Inputs**, all from the shop workload (``riverbed.workloads``), one :class:`ShopConfig`
(:data:`SHOP`: 300,000 users, the number that sustains 1,000 events/s; 5,000 products):

- the clickstream, :func:`riverbed.workloads.shop.events` at 1,000 events/s of event time,
  ``fraud_fraction`` raised to 0.05 so that payments are not 4% of the events only (card
  testing then makes about 85% of the payments): ``search_ctr`` gets the first searches
  and clicks in arrival order, ``fraud_alerts`` the first payments;
- the database, :func:`riverbed.workloads.oltp.operations` at 200 operations/s of event
  time, turned into the records riverbed's log-based capture writes (:class:`Capture`,
  riverbed.cdc's own envelope code, without PostgreSQL): the initial load as snapshot rows
  (op ``r``), then one transaction per operation, REPLICA IDENTITY DEFAULT (``before``
  null for an update, the key for a delete, a tombstone after each delete),
  ``source.ts_ms`` the operation's time. ``category_sales`` gets the first
  ``shop.public.orders`` and ``shop.public.products`` records (the products' snapshot
  first); ``enriched_clicks`` gets ``shop.public.users`` (the 300,000 users' snapshot, then
  sign-ups, profile changes and deleted accounts) interleaved by event time with the
  clicks, until the two make ``--events`` records.

``enriched_clicks`` reads the users' snapshot with a query of its own first (same
checkpoint; printed as the preload, not timed), as a pipeline started once the table is
loaded would. In one backlog, ``maxOffsetsPerTrigger`` gives each partition a share in
proportion to its backlog, so the 300,000 snapshot rows (all at the stream's start) would
fill the users' share of the first batches while the clicks moved on by the better part of
an hour: every click of that hour would be joined with no profile, then corrected.

**Checks** (a broken pipeline must not report a good number; each raises SystemExit):
every input record read; ``search_ctr``: per (window, query) the searches equal those
produced (every search counts, late or not); clicked searches never above the reference
(searches with a click within 10 minutes), in total at least 90% of it (a straggler click
can come after its search expired). ``enriched_clicks``: every click once in the final
changelog, its profile the plain-Python as-of lookup's (the user's latest change, in
changelog order, with ``source.ts_ms <= ts``, a snapshot row valid from the beginning of
time). ``category_sales``: the final changelog equals the aggregate
computed in plain Python from the final tables. ``fraud_alerts``: each alert of the final
changelog equals a plain-Python matcher's over the payments not sent to
``fraud_alerts_late``, every alert of that matcher whose approval the final watermark has
passed (less a minute) is there, and no record repeats the value its key had (alerts are
written early and corrected, never written twice).

Not part of the test run; results go in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from _common import (
    PRODUCER_SETTINGS,
    machine,
    print_totals,
    run_to_end,
    start_broker,
    watermark_ms,
)
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import riverbed.spark
from riverbed.cdc.changes import SnapshotRecords, dumps
from riverbed.cdc.envelope import Source, change_event
from riverbed.cdc.preflight import TableInfo
from riverbed.pipelines.operators.buckets import LAYOUT
from riverbed.pipelines.shop import PIPELINES
from riverbed.testing.references import (
    category_sales,
    fraud_alerts,
    profile_as_of,
    search_ctr,
)
from riverbed.testing.topic_reader import last_values, read_to_end, repeated_keys
from riverbed.workloads.oltp import PRIMARY_KEYS, Operation, OpKind, operations
from riverbed.workloads.shop import Event, ShopConfig, events

NAMES = ("search_ctr", "enriched_clicks", "category_sales", "fraud_alerts")
PARTITIONS = 4
SHOP = ShopConfig(
    seed=0, users=300_000, products=5_000, event_rate=1_000.0, fraud_fraction=0.05, oltp_rate=200.0
)
"""The full run's shop (module docstring); sustainable_rate(SHOP) is about 1,030 events/s."""
QUICK_SHOP = replace(SHOP, users=10_000, products=500, event_rate=30.0, oltp_rate=6.0)
WARMUP_SHOP = replace(SHOP, users=1_000, products=100, event_rate=3.0, oltp_rate=0.6)
"""The warm-up runs' shop: small, so that the users' snapshot is a small part of them."""
QUICK = {"events": 50_000, "max_offsets": 10_000, "warmup_events": 5_000, "shop": QUICK_SHOP}
PREFIX, DB = "shop", "shop"  # the capture's topic prefix and database (DESIGN.md)
FIRST_LSN, FIRST_XID = 0x1_6B3_7480, 740
WAL_STEP = 200  # each transaction: one change at lsn, its commit at lsn + WAL_STEP // 2
PRODUCE_DELAY_MS = 40  # the envelope's ts_ms: when the capture produced the change
MINUTE_MS = 60_000
CUSTOM_METRICS = (
    "rocksdbSstFileSize",
    "rocksdbNumInternalColFamiliesKeys",
    "rocksdbPinnedBlocksMemoryUsage",
    "numRegisteredTimers",
    "numDeletedTimers",
    "numValueStateVars",
    "numMapStateVars",
    "numListStateVars",
)
"""The custom metrics of a state operator worth printing (of some thirty)."""
LATE_TOPICS = {"enriched_clicks": ("enriched_clicks_late",)}
"""Side outputs a pipeline writes that its catalog entry does not list (yet)."""
SPARK_CONFIG = {"spark.sql.streaming.numRecentProgressUpdates": "1000"}

Record = tuple[str, bytes, bytes | None]
"""topic, key, value (None: a tombstone)."""
Row = dict[str, Any]
Output = list[tuple[bytes | None, bytes | None]]
"""An output topic's records, key and value, in order."""


def iso_utc(epoch_ms: int) -> str:
    """A timestamptz as the capture writes it (riverbed.cdc.envelope)."""
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Capture:
    """The records riverbed's log-based capture writes for the shop's operations (module
    docstring), built with riverbed.cdc's own envelope code; keeps each table's rows."""

    def __init__(self, tables: Sequence[str], start_ms: int) -> None:
        self.start_ms = start_ms
        self.rows: dict[str, dict[str, Row]] = {table: {} for table in tables}
        self.snapshots = {
            table: SnapshotRecords(
                prefix=PREFIX,
                db=DB,
                table=TableInfo(
                    schema="public",
                    table=table,
                    key_columns=(PRIMARY_KEYS[table],),
                    replica_identity="d",
                ),
                lsn=FIRST_LSN,
                tx_id=FIRST_XID,
            )
            for table in tables
        }
        self.lsn, self.xid = FIRST_LSN, FIRST_XID

    def records(self, op: Operation) -> list[Record]:
        rows = self.rows.get(op.table)
        if rows is None:
            return []
        values = {
            k: iso_utc(v) if k == "created_at" and isinstance(v, int) else v
            for k, v in op.values.items()
        }
        if op.at_ms == self.start_ms:  # the initial load (later operations come after it)
            assert op.kind is OpKind.INSERT
            rows[op.key] = values
            record = self.snapshots[op.table].record(values, last=False, now_ms=op.at_ms)
            return [(record.topic, record.key, record.value)]
        self.lsn += WAL_STEP
        self.xid += 1
        source = Source(
            name=PREFIX,
            db=DB,
            schema="public",
            table=op.table,
            tx_id=self.xid,
            lsn=self.lsn,
            commit_lsn=self.lsn + WAL_STEP // 2,
            commit_ts_ms=op.at_ms,
        )
        topic, key = f"{PREFIX}.public.{op.table}", {PRIMARY_KEYS[op.table]: op.key}
        before: Row | None = None
        after: Row | None
        if op.kind is OpKind.INSERT:
            code, after = "c", values
            rows[op.key] = values
        elif op.kind is OpKind.UPDATE:
            code, after = "u", rows[op.key]
            after.update(values)
        else:
            code, before, after = "d", key, None
            del rows[op.key]
        event = change_event(
            op=code, before=before, after=after, source=source, ts_ms=op.at_ms + PRODUCE_DELAY_MS
        )
        out: list[Record] = [(topic, dumps(key), dumps(event))]
        if code == "d":
            out.append((topic, dumps(key), None))
        return out


def event_record(event: Event) -> Record:
    return (event.topic, dumps(event.key), dumps(event.value))


class Inputs(Protocol):
    """One pipeline's input records and what its output must be."""

    name: str
    preload: list[Record]
    """Records read by a query of their own before the timed one (none, or a snapshot)."""
    records: list[Record]

    def check(self, outputs: dict[str, Output], watermark_ms: int) -> str:
        """A summary of the output, or SystemExit if it is wrong."""
        ...


def changelog(output: Output) -> dict[str, Row]:
    """The table an output topic's records describe: the last value per key (keys as JSON
    text with sorted fields; a tombstone removes the key)."""
    return last_values(
        (json.dumps(json.loads(key or b"null"), sort_keys=True), value and json.loads(value))
        for key, value in output
    )


def fail(name: str, problems: Sequence[str]) -> None:
    if problems:
        raise SystemExit(f"{name} output wrong:\n" + "\n".join(problems[:20]))


@dataclass
class SearchCtrInputs:
    size: int
    name: str = "search_ctr"
    preload: list[Record] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    searches: list[Row] = field(default_factory=list)
    clicks: list[Row] = field(default_factory=list)

    def offer(self, event: Event) -> None:
        if len(self.records) >= self.size or event.topic not in ("searches", "clicks"):
            return
        self.records.append(event_record(event))
        (self.searches if event.topic == "searches" else self.clicks).append(event.value)

    @property
    def full(self) -> bool:
        return len(self.records) >= self.size

    def check(self, outputs: dict[str, Output], watermark_ms: int) -> str:
        """Per (window, query) the searches equal the reference's (every search counts, late
        or not); clicked searches never above it, in total at least 90% of it (a straggler
        click can come after its search expired)."""
        reference = {
            (r["window_start"], r["query"]): r for r in search_ctr(self.searches, self.clicks)
        }
        got = {
            (v["window_start"], v["query"]): v for v in changelog(outputs["search_ctr"]).values()
        }
        problems = [
            f"{k}: {got.get(k, {}).get('searches')} searches, produced {r['searches']}"
            for k, r in reference.items()
            if got.get(k, {}).get("searches") != r["searches"]
        ]
        problems += [f"{k} not searched but in the output" for k in got.keys() - reference.keys()]
        problems += [
            f"{k}: {v['clicked_searches']} clicked > reference {reference[k]['clicked_searches']}"
            for k, v in got.items()
            if k in reference and v["clicked_searches"] > reference[k]["clicked_searches"]
        ]
        searches = sum(r["searches"] for r in reference.values())
        clicked = sum(r["clicked_searches"] for r in reference.values())
        total = sum(v["clicked_searches"] for v in got.values())
        if total < 0.9 * clicked:
            problems.append(f"{total} clicked searches, reference {clicked}")
        fail(self.name, problems)
        return (
            f"{len(got):,} (window, query) rows, {searches:,} searches, {total:,} "
            f"clicked ({total / max(1, clicked):.1%} of the reference's {clicked:,})"
        )


@dataclass
class EnrichedClicksInputs:
    size: int
    config: ShopConfig
    name: str = "enriched_clicks"
    preload: list[Record] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    clicks: dict[str, tuple[str, int]] = field(default_factory=dict)  # id -> user, ts
    versions: dict[str, list[tuple[int | None, Row | None]]] = field(default_factory=dict)
    """User -> (source.ts_ms, None for a snapshot row; the row), in changelog order."""
    now_ms: int = -1

    def __post_init__(self) -> None:
        self.capture = Capture(["users"], self.config.start_ms)
        self.operations = (op for op in operations(self.config) if op.table == "users")
        self.next_op = next(self.operations)

    def offer(self, event: Event) -> None:
        if self.full or event.topic != "clicks":
            return
        self.now_ms = max(self.now_ms, event.ts)
        while self.next_op.at_ms <= self.now_ms and not self.full:
            op = self.next_op
            snapshot = op.at_ms == self.config.start_ms  # the initial load (Capture)
            (self.preload if snapshot else self.records).extend(self.capture.records(op))
            row = self.capture.rows["users"].get(op.key)
            at_ms = None if snapshot else op.at_ms  # a snapshot row: from the beginning
            self.versions.setdefault(op.key, []).append((at_ms, row and dict(row)))
            self.next_op = next(self.operations)
        if not self.full:
            self.records.append(event_record(event))
            value = event.value
            self.clicks[str(value["click_id"])] = (str(value["user_id"]), event.ts)

    @property
    def full(self) -> bool:
        return len(self.preload) + len(self.records) >= self.size

    def check(self, outputs: dict[str, Output], watermark_ms: int) -> str:
        got = changelog(outputs["enriched_clicks"])
        seen = {value["click_id"]: value for value in got.values()}
        problems = [f"click {c} missing" for c in self.clicks.keys() - seen.keys()]
        problems += [f"click {c} not produced" for c in seen.keys() - self.clicks.keys()]
        profiles = 0
        for click_id, value in seen.items():
            if click_id not in self.clicks:
                continue
            user_id, ts = self.clicks[click_id]
            row = profile_as_of(self.versions.get(user_id, []), ts) or {}
            expected = {f: row.get(f) for f in ("name", "country", "tier")}
            actual = {f: value.get(f) for f in ("name", "country", "tier")}
            if actual != expected:
                problems.append(f"click {click_id} at {ts}: {actual}, as of then {expected}")
            profiles += row != {}
        fail(self.name, problems)
        users = len(self.preload) + len(self.records) - len(self.clicks)
        late = sum(len(outputs.get(t, [])) for t in LATE_TOPICS[self.name])
        return (
            f"{len(seen):,} clicks ({profiles:,} with a profile) from {len(self.clicks):,} "
            f"clicks and {users:,} users records, {len(outputs['enriched_clicks']):,} records "
            f"written (corrections included), {late:,} late records"
        )


@dataclass
class FraudAlertsInputs:
    size: int
    name: str = "fraud_alerts"
    preload: list[Record] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    payments: list[Row] = field(default_factory=list)

    def offer(self, event: Event) -> None:
        if not self.full and event.topic == "payments":
            self.records.append(event_record(event))
            self.payments.append(event.value)

    @property
    def full(self) -> bool:
        return len(self.records) >= self.size

    def reference(self, late: set[str]) -> dict[tuple[str, str], Row]:
        """The alerts (riverbed.testing.references) over the payments not in ``late``, per
        (card, payment)."""
        payments = (p for p in self.payments if p["payment_id"] not in late)
        return {(a["card_id"], a["payment_id"]): a for a in fraud_alerts(payments)}

    def check(self, outputs: dict[str, Output], watermark_ms: int) -> str:
        late = {json.loads(key or b"{}")["payment_id"] for key, _ in outputs["fraud_alerts_late"]}
        expected = self.reference(late)
        got = {
            (v["card_id"], v["payment_id"]): v for v in changelog(outputs["fraud_alerts"]).values()
        }
        # Early alerts, then their corrections: none written twice.
        repeated = repeated_keys(outputs["fraud_alerts"])
        fail(self.name, [f"{key!r} written twice with the same value" for key in repeated[:3]])
        problems = [
            f"{k}: {v}, expected {expected.get(k)}" for k, v in got.items() if expected.get(k) != v
        ]
        due = {k for k, v in expected.items() if v["approved_ts"] <= watermark_ms - MINUTE_MS}
        problems += [f"{k} missing (watermark {watermark_ms})" for k in due - got.keys()]
        if not got:
            problems.append("no alert")
        fail(self.name, problems)
        return (
            f"{len(got):,} alerts, all in the reference, which has {len(due):,} up to the final "
            f"watermark less a minute (all written) and {len(expected) - len(due):,} after; "
            f"{len(late):,} late payments; {len(outputs['fraud_alerts']):,} records written "
            "(early alerts and their corrections)"
        )


@dataclass
class CategorySalesInputs:
    size: int
    config: ShopConfig
    name: str = "category_sales"
    preload: list[Record] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.capture = Capture(["orders", "products"], self.config.start_ms)
        for op in operations(self.config):
            self.records += self.capture.records(op)
            if len(self.records) >= self.size:
                break

    def reference(self) -> dict[str, Row]:
        """category_sales (riverbed.testing.references) of the final tables, by category."""
        rows = self.capture.rows
        return {r["category"]: r for r in category_sales(rows["orders"].values(), rows["products"])}

    def check(self, outputs: dict[str, Output], watermark_ms: int) -> str:
        expected = self.reference()
        got = {v["category"]: v for v in changelog(outputs["category_sales"]).values()}
        problems = [
            f"{c}: {got.get(c)}, expected {expected.get(c)}"
            for c in got.keys() | expected.keys()
            if got.get(c) != expected.get(c)
        ]
        fail(self.name, problems)
        orders = self.capture.rows["orders"]
        return (
            f"{len(got)} categories equal the reference ({sum(v['orders'] for v in got.values()):,}"
            f" orders joined of {len(orders):,}; {len(self.capture.rows['products']):,} products), "
            f"{len(outputs['category_sales']):,} records written"
        )


def generate(config: ShopConfig, names: Sequence[str], size: int) -> dict[str, Inputs]:
    """Each pipeline's ``size`` input records (module docstring), in the order they arrive."""
    clickstream: dict[str, SearchCtrInputs | EnrichedClicksInputs | FraudAlertsInputs] = {}
    if "search_ctr" in names:
        clickstream["search_ctr"] = SearchCtrInputs(size)
    if "enriched_clicks" in names:
        clickstream["enriched_clicks"] = EnrichedClicksInputs(size, config)
    if "fraud_alerts" in names:
        clickstream["fraud_alerts"] = FraudAlertsInputs(size)
    collectors = list(clickstream.values())
    stream: Iterator[Event] = events(config)
    while collectors:
        event = next(stream)
        for collector in collectors:
            collector.offer(event)
        collectors = [c for c in collectors if not c.full]
    inputs: dict[str, Inputs] = dict(clickstream)
    if "category_sales" in names:
        inputs["category_sales"] = CategorySalesInputs(size, config)
    return {name: inputs[name] for name in names}


def output_topics(name: str) -> list[str]:
    return list(dict.fromkeys([*PIPELINES[name].outputs, *LATE_TOPICS.get(name, ())]))


def create_topics(bootstrap: str, name: str) -> None:
    """The pipeline's inputs (PARTITIONS each) and outputs (as ``riverbed pipeline run``
    creates them: one partition, compacted)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = [NewTopic(t, num_partitions=PARTITIONS) for t in PIPELINES[name].inputs]
    wanted += [
        NewTopic(t, num_partitions=1, config={"cleanup.policy": "compact"})
        for t in output_topics(name)
    ]
    for future in admin.create_topics(wanted).values():
        future.result(timeout=30)


def produce(bootstrap: str, records: Sequence[Record]) -> None:
    """Produce the records, in order, partitioned by key as Kafka's clients do."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, **PRODUCER_SETTINGS, "partitioner": "murmur2_random"}
    )
    send = producer.produce
    for i, (topic, key, value) in enumerate(records):
        send(topic, value, key=key)
        if i % 100_000 == 0:
            producer.poll(0)
    if producer.flush(300) != 0:
        raise SystemExit("records not delivered")


def read_topic(bootstrap: str, topic: str) -> Output:
    """Every record of ``topic`` (one partition), read_committed, to its end."""
    records = read_to_end(bootstrap, topic, partitions=1, timeout_s=300)
    return [(r.key, r.value) for r in records]


def offsets(value: Any) -> dict[tuple[str, str], int]:
    """A source offset of the progress report (JSON text or object) by (topic, partition)."""
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, dict):
        return {}
    return {
        (topic, partition): int(offset)
        for topic, partitions in value.items()
        for partition, offset in partitions.items()
    }


def batch_records(progress: dict[str, Any]) -> int:
    """The input records a batch read, from its offsets: ``numInputRows`` counts a record
    once per scan of the source, and a pipeline that takes two topics from one source
    (a union of two filters) scans it twice."""
    total = 0
    for source in progress.get("sources", []):
        start, end = offsets(source.get("startOffset")), offsets(source.get("endOffset"))
        total += sum(offset - start.get(tp, 0) for tp, offset in end.items())
    return total


def disk_bytes(directory: Path) -> int:
    return sum(
        (Path(parent) / name).stat().st_size
        for parent, _, files in os.walk(directory)
        for name in files
    )


@dataclass
class StateVariable:
    name: str
    rows: int
    json_bytes: int
    """The size of its rows (key and value) as JSON: the state's payload, roughly."""
    keys: int | None = None
    """For the slots of :class:`riverbed.pipelines.operators.buckets.KeyedStates` (a map state whose
    value is one JSON object, ``keys``): the per-key states they hold."""


def state_contents(spark: SparkSession, checkpoint: Path) -> dict[int, list[StateVariable]]:
    """Per stateful operator (its id: ``state/<id>``, the index in the progress report's
    ``stateOperators``), what its state store holds after the last batch, read with Spark's
    state data source: the rows of each state variable and the registered timers."""
    found: dict[int, list[StateVariable]] = {}
    for operator in spark.read.format("state-metadata").load(str(checkpoint)).collect():
        properties = json.loads(operator["operatorProperties"] or "{}")
        variables = found.setdefault(operator["operatorId"], [])
        for variable in properties.get("stateVariables", []):
            reader = spark.read.format("statestore").option("operatorId", operator["operatorId"])
            if variable["stateVariableType"] == "TimerState":
                name, reader = "(timers)", reader.option("readRegisteredTimers", "true")
            else:
                name = variable["stateName"]
                reader = reader.option("stateVarName", name)
            frame = reader.load(str(checkpoint)).drop("partition_id")
            size = F.length(F.to_json(F.struct(*frame.columns)))
            rows, json_bytes = frame.agg(F.count(F.lit(1)), F.sum(size)).first() or (0, 0)
            keys = None
            if (
                "user_map_value" in frame.columns
                and frame.schema["user_map_value"].dataType.simpleString() == "struct<keys:string>"
            ):
                blob = F.col("user_map_value.keys")  # a slot: the layout line, a line a key
                in_slot = F.when(blob.startswith(LAYOUT), F.size(F.split(blob, "\n")) - 1)
                keys = (frame.agg(F.sum(in_slot)).first() or (None,))[0]
            variables.append(StateVariable(name, rows, json_bytes or 0, keys))
    return found


@dataclass
class Phase:
    """One query's run."""

    records: int
    """Input records read (from the batches' offsets)."""
    seconds: float
    batches: list[dict[str, Any]]
    """The progress reports."""
    cpu_s: Counter[str]

    @property
    def rate(self) -> float:
        return self.records / self.seconds

    def batch_rates(self) -> list[float]:
        """Per batch that read records: records / its triggerExecution time."""
        return [
            batch_records(b) * 1000 / max(1, b["durationMs"].get("triggerExecution", 0))
            for b in self.batches
            if batch_records(b)
        ]

    def spark_rates(self) -> list[float]:
        """Per batch that read records: Spark's ``processedRowsPerSecond`` (numInputRows,
        which counts a record once per scan of the source, over the processing time)."""
        return [b["processedRowsPerSecond"] for b in self.batches if b.get("numInputRows")]


@dataclass
class Run:
    preload: Phase | None
    timed: Phase
    state_disk: dict[str, int]
    """Bytes under the checkpoint's state/<operator id>."""
    contents: dict[int, list[StateVariable]]
    summary: str

    def state(self) -> list[dict[str, Any]]:
        """The last progress report's stateOperators."""
        operators: list[dict[str, Any]] = self.timed.batches[-1].get("stateOperators", [])
        return operators


def run_query(
    spark: SparkSession, name: str, bootstrap: str, checkpoint: Path, max_offsets: int
) -> Phase:
    """One AvailableNow query of the pipeline, as ``riverbed pipeline run`` builds it (module
    docstring), timed from its start to its end."""
    timed = run_to_end(spark, PIPELINES[name], bootstrap, checkpoint, max_offsets)
    records = sum(batch_records(b) for b in timed.batches)
    return Phase(records, timed.seconds, timed.batches, timed.cpu_s)


def run_pipeline(spark: SparkSession, inputs: Inputs, directory: Path, max_offsets: int) -> Run:
    """On a broker of its own: the preload and its query, if any, then the records and the
    timed query; then the output is checked and the state measured."""
    process, bootstrap = start_broker(directory / "broker")
    checkpoint = directory / "checkpoint"
    try:
        create_topics(bootstrap, inputs.name)
        preload = None
        if inputs.preload:
            produce(bootstrap, inputs.preload)
            preload = run_query(spark, inputs.name, bootstrap, checkpoint, max_offsets)
        produce(bootstrap, inputs.records)
        timed = run_query(spark, inputs.name, bootstrap, checkpoint, max_offsets)
        for phase, records in ((preload, inputs.preload), (timed, inputs.records)):
            if phase is not None and phase.records != len(records):
                raise SystemExit(f"{inputs.name} read {phase.records} records of {len(records)}")
        outputs = {topic: read_topic(bootstrap, topic) for topic in output_topics(inputs.name)}
        batches = (preload.batches if preload else []) + timed.batches
        summary = inputs.check(outputs, max(watermark_ms(b) for b in batches))
        state = checkpoint / "state"
        disk = {p.name: disk_bytes(p) for p in sorted(state.iterdir())} if state.exists() else {}
        contents = state_contents(spark, checkpoint) if disk else {}
        return Run(preload, timed, disk, contents, summary)
    finally:
        process.terminate()
        process.wait(60)


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def print_phase(label: str, phase: Phase) -> None:
    rates = phase.batch_rates()
    print(
        f"{label}: {phase.records:,} input records in {phase.seconds:.1f} s = "
        f"{phase.rate:,.0f} events/s ({len(phase.batches)} batches; per data batch "
        f"{', '.join(f'{r:,.0f}' for r in rates)} records/s, median "
        f"{statistics.median(rates) if rates else 0:,.0f}; Spark's processedRowsPerSecond "
        f"{', '.join(f'{r:,.0f}' for r in phase.spark_rates())})",
        flush=True,
    )
    print_totals(phase.batches, phase.cpu_s, phase.seconds)
    for batch in phase.batches:
        rows = [op.get("numRowsTotal", 0) for op in batch.get("stateOperators", [])]
        print(
            f"  batch {batch['batchId']}: {batch_records(batch):,} records "
            f"(numInputRows {batch.get('numInputRows', 0):,}), "
            f"{batch['durationMs'].get('triggerExecution', 0):,} ms "
            f"(addBatch {batch['durationMs'].get('addBatch', 0):,}), "
            f"processedRowsPerSecond {batch.get('processedRowsPerSecond', 0):,.0f}, watermark "
            f"{batch.get('eventTime', {}).get('watermark', '-')}, state rows {rows}",
            flush=True,
        )


def print_run(label: str, run: Run) -> None:
    if run.preload is not None:
        print_phase(f"{label}, preload (its own query, not timed)", run.preload)
    print_phase(label, run.timed)
    print(f"  output checked: {run.summary}", flush=True)
    for index, op in enumerate(run.state()):
        custom = op.get("customMetrics", {})
        metrics = ", ".join(f"{k} {v:,}" for k in CUSTOM_METRICS if (v := custom.get(k)))
        print(
            f"  state operator {index} ({op.get('operatorName')}): numRowsTotal "
            f"{op.get('numRowsTotal', 0):,}, memoryUsedBytes "
            f"{mib(op.get('memoryUsedBytes', 0))}, on disk "
            f"{mib(run.state_disk.get(str(index), 0))}; {metrics}",
            flush=True,
        )
        held = ", ".join(
            f"{v.name} {v.rows:,} rows"
            + ("" if v.keys is None else f" holding {v.keys:,} keys' states")
            + f" ({mib(v.json_bytes)} as JSON)"
            for v in run.contents.get(index, [])
        )
        print(f"    holds: {held}", flush=True)


def table_row(name: str, run: Run) -> str:
    """A line of the summary table (Markdown)."""
    records = run.timed.records + (run.preload.records if run.preload else 0)
    state = "; ".join(
        f"op {i}: "
        + ", ".join(f"{v.name} {v.rows:,}" for v in run.contents.get(i, []))
        + f" / numRowsTotal {op.get('numRowsTotal', 0):,}, "
        f"{mib(op.get('memoryUsedBytes', 0))}, {mib(run.state_disk.get(str(i), 0))} on disk"
        for i, op in enumerate(run.state())
    )
    rates = run.timed.batch_rates()
    return (
        f"| {name} | {records:,} | {run.timed.records:,} | {run.timed.seconds:.1f} | "
        f"{run.timed.rate:,.0f} | {statistics.median(rates) if rates else 0:,.0f} | {state} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="input records")
    parser.add_argument("--max-offsets", type=int, default=100_000, help="maxOffsetsPerTrigger")
    parser.add_argument(
        "--warmup-events", type=int, default=20_000, help="input records of the warm-up run"
    )
    parser.add_argument("--only", nargs="+", choices=NAMES, default=list(NAMES))
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra Spark setting (repeatable)",
    )
    args = parser.parse_args()
    args.shop = SHOP
    extra = dict(setting.partition("=")[::2] for setting in args.conf)
    if args.quick:
        for name, value in QUICK.items():
            setattr(args, name, value)
    print(f"machine: {machine()}", flush=True)
    print(f"load average before: {os.getloadavg()}", flush=True)
    started = time.perf_counter()
    inputs = generate(args.shop, args.only, args.events)
    warmups = generate(WARMUP_SHOP, args.only, args.warmup_events) if args.warmup_events else {}
    print(
        f"generated the inputs in {time.perf_counter() - started:.1f} s ({args.shop}); "
        f"AvailableNow, maxOffsetsPerTrigger {args.max_offsets:,}",
        flush=True,
    )
    runs: dict[str, Run] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        spark = riverbed.spark.session(
            "benchmark", master="local[2]", log_level="ERROR", config={**SPARK_CONFIG, **extra}
        )
        print(f"Spark {spark.version}, local[2]", flush=True)
        try:
            for name in args.only:
                counts = Counter(topic for topic, _, _ in inputs[name].records)
                preload = Counter(topic for topic, _, _ in inputs[name].preload)
                print(
                    f"\n{name}: inputs {dict(counts)}"
                    + (f", preloaded before them {dict(preload)}" if preload else ""),
                    flush=True,
                )
                if name in warmups:
                    batch = max(1, args.warmup_events // 4)
                    warm = run_pipeline(spark, warmups[name], root / f"{name}-warmup", batch)
                    print_run(f"{name} warm-up (not counted)", warm)
                runs[name] = run_pipeline(spark, inputs[name], root / name, args.max_offsets)
                print_run(name, runs[name])
        finally:
            spark.stop()
    print(f"\nload average after: {os.getloadavg()}", flush=True)
    print(
        "\n| pipeline | input records | timed records | s | events/s | median batch "
        "records/s | state after them (per operator: rows per state variable / Spark's "
        "numRowsTotal, memoryUsedBytes, on disk) |",
        flush=True,
    )
    print("|---|---|---|---|---|---|---|")
    for name, run in runs.items():
        print(table_row(name, run), flush=True)


if __name__ == "__main__":
    main()
