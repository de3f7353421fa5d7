"""The demo's CDC section: the shop's PostgreSQL, followed through its log.

1. A private PostgreSQL cluster (:mod:`riverbed.testing.postgres`, ``wal_level=logical``) gets
   the shop's tables; ``riverbed cdc`` (log-based capture) starts on ``users``, ``products``
   and ``orders`` and publishes every committed change to ``shop.public.*``.
2. The shop workload runs in real time (event time = wall-clock time, so that a click's
   ``ts`` and a profile change's commit time are on one clock): the initial load, then
   orders, price and category changes, profile changes and deletes in the database, and the
   clickstream into the event topics. Nothing writes twice: the database is written, the
   topics follow it.
3. Two pipelines run on Spark meanwhile: ``enriched_clicks`` (each click with the user's
   profile as of the click's time) and ``category_sales`` (``orders ⨝ products`` per
   category, kept up to date through updates and deletes). The current sales table is
   printed as it changes.
4. At the end the demo checks the derived data against the source of truth: the final
   ``category_sales`` equals the same ``GROUP BY`` run on PostgreSQL, and every click
   produced was enriched once.

``enriched_clicks`` starts at the end of ``clicks`` (the earlier demo sections wrote
clicks of January 2026, before any profile existed); the CDC topics are read from their
beginning.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg2
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from riverbed.cdc.capture import LogCaptureConfig, run_log_capture
from riverbed.demo.console import kafka_config, tail_consumer
from riverbed.demo.shop_pipelines import start
from riverbed.pipelines.runner import ensure_outputs, stop_between_batches
from riverbed.pipelines.shop import PIPELINES
from riverbed.testing.postgres import PostgresCluster
from riverbed.workloads.database import ShopDatabase
from riverbed.workloads.playback import PlaybackConfig, run_shop
from riverbed.workloads.shop import ShopConfig

TABLES = ("public.users", "public.products", "public.orders")
SALES_SQL = """
    SELECT p.category, count(*), sum(o.quantity), sum(o.quantity * p.price_cents)
    FROM orders o JOIN products p ON p.product_id = o.product_id
    WHERE o.status IS DISTINCT FROM 'cancelled'
    GROUP BY p.category
"""


class _Tail(threading.Thread):
    """Follows ``category_sales`` and ``enriched_clicks`` (read_committed) as changelogs."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.sales: dict[str, dict[str, Any]] = {}
        self.clicks: dict[str, dict[str, Any]] = {}
        self.changed = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        outputs = ("category_sales", "enriched_clicks")
        consumer = tail_consumer(self.bootstrap, outputs, group="demo-cdc-tail")
        shown = time.monotonic()
        try:
            while not self.stop.is_set():
                if self.changed.is_set() and time.monotonic() - shown >= 5:
                    self.changed.clear()
                    shown = time.monotonic()
                    totals = _totals(self.sales).values()
                    print(
                        f"  category_sales now: {len(self.sales)} categories, "
                        f"{sum(t[0] for t in totals):,} orders, "
                        f"{sum(t[2] for t in totals) / 100:,.2f} revenue; "
                        f"{len(self.clicks):,} clicks enriched",
                        flush=True,
                    )
                for message in consumer.consume(num_messages=1000, timeout=0.2):
                    raw_key, raw_value = message.key(), message.value()
                    if message.error() is not None or raw_key is None:
                        continue
                    key = json.loads(raw_key)
                    value = None if raw_value is None else json.loads(raw_value)
                    if message.topic() == "category_sales":
                        if value is None:
                            self.sales.pop(key["category"], None)
                        else:
                            self.sales[key["category"]] = value
                        self.changed.set()
                    elif value is not None:
                        self.clicks[key["click_id"]] = value
        finally:
            consumer.close()


@contextmanager
def capturing(config: LogCaptureConfig) -> Iterator[list[BaseException]]:
    """``riverbed cdc``'s log-based capture of ``config`` on a thread of its own, once it
    has created its topics; yields the list its error goes to if it fails meanwhile (the
    section shows it), and stops it at the end."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def capture() -> None:
        try:
            run_log_capture(config, say=lambda line: None, stopping=stop.is_set)
        except BaseException as e:  # shown by the section
            errors.append(e)

    thread = threading.Thread(target=capture, daemon=True)
    thread.start()
    try:
        topics = {f"{config.prefix}.{t}" for t in config.tables}
        admin = AdminClient(kafka_config(config.bootstrap))
        deadline = time.monotonic() + 60
        while not topics <= set(admin.list_topics(timeout=10).topics):
            if errors:
                raise SystemExit(f"demo: the capture failed: {errors[0]}")
            if time.monotonic() > deadline:
                raise SystemExit(f"demo: the capture did not create {sorted(topics)} in 60 s")
            time.sleep(0.2)
        yield errors
    finally:
        stop.set()
        thread.join(30)


def _end_offsets(bootstrap: str, topic: str) -> dict[str, int]:
    consumer = Consumer(kafka_config(bootstrap, {"group.id": "demo-ends"}))
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {
            str(p): consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions
        }
    finally:
        consumer.close()


def _print_sales(sales: dict[str, dict[str, Any]], label: str) -> None:
    print(f"category_sales {label}:")
    for category in sorted(sales):
        row = sales[category]
        print(
            f"    {category:<12} {row['orders']:>4} orders {row['units']:>5} units "
            f"{row['revenue_cents'] / 100:>12,.2f}"
        )


def _database_sales(dsn: str) -> dict[str, tuple[int, int, int]]:
    connection = psycopg2.connect(dsn)
    try:
        cursor = connection.cursor()
        cursor.execute(SALES_SQL)
        return {c: (int(n), int(u), int(r)) for c, n, u, r in cursor.fetchall()}
    finally:
        connection.close()


def _totals(sales: dict[str, dict[str, Any]]) -> dict[str, tuple[int, int, int]]:
    return {c: (v["orders"], v["units"], v["revenue_cents"]) for c, v in sales.items()}


def run(spark: SparkSession, cluster: PostgresCluster, bootstrap: str, *, seconds: float) -> None:
    """Capture the shop's tables from ``cluster``, run the shop for ``seconds`` of real
    time with both pipelines on ``spark``, then check them (module docstring)."""
    print(f"PostgreSQL {cluster.dsn} (wal_level=logical), a private cluster for the demo")
    tail = _Tail(bootstrap)
    database = ShopDatabase.connect(cluster.dsn, timeout_s=10)
    database.create_tables()
    database.close()
    capture_config = LogCaptureConfig(
        dsn=cluster.dsn,
        bootstrap=bootstrap,
        prefix="shop",
        tables=TABLES,
        slot="riverbed_demo",
        publication="riverbed_demo",
    )
    try:
        with capturing(capture_config) as errors:
            _follow_the_shop(spark, cluster, bootstrap, tail, errors, seconds=seconds)
    finally:
        tail.stop.set()


def _follow_the_shop(
    spark: SparkSession,
    cluster: PostgresCluster,
    bootstrap: str,
    tail: _Tail,
    errors: list[BaseException],
    *,
    seconds: float,
) -> None:
    """The shop for ``seconds`` with both pipelines, while the capture runs; the checks."""
    cdc_topics = [f"shop.{t}" for t in TABLES]
    print(f"riverbed cdc capturing {', '.join(TABLES)} into {', '.join(cdc_topics)}")
    for name in ("enriched_clicks", "category_sales"):
        ensure_outputs(PIPELINES[name], bootstrap, 10.0)
    clicks_end = _end_offsets(bootstrap, "clicks")
    tail.start()
    queries = []
    with tempfile.TemporaryDirectory() as checkpoints:
        for name in ("enriched_clicks", "category_sales"):
            pipeline = PIPELINES[name]
            starting = {t: {"0": -2} for t in pipeline.inputs if t.startswith("shop.")}
            if "clicks" in pipeline.inputs:
                starting["clicks"] = clicks_end
            queries.append(
                start(
                    spark,
                    bootstrap,
                    name,
                    Path(checkpoints),
                    starting_offsets=json.dumps(starting),
                )
            )
        print("enriched_clicks and category_sales running; the shop runs in real time")
        shop = ShopConfig(
            seed=11,
            users=1_000,
            products=60,
            start_ms=int(time.time() * 1000),
            event_rate=60.0,
            late_fraction=0.0,
            oltp_rate=8.0,
        )
        events = int(seconds * shop.event_rate)
        summary = run_shop(
            shop,
            PlaybackConfig(bootstrap=bootstrap, dsn=cluster.dsn, events=events, rate=60.0),
            stopping=lambda: bool(errors),
        )
        ops = ", ".join(f"{n:,} {kind.value}s" for kind, n in summary.operations.items())
        print(
            f"the shop made {ops} in PostgreSQL and sent {summary.events:,} events "
            f"({summary.per_topic['clicks']:,} clicks) in {summary.elapsed_s:.0f} s"
        )
        expected = _database_sales(cluster.dsn)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not errors:
            done = len(tail.clicks) >= summary.per_topic["clicks"]
            if done and _totals(tail.sales) == expected:
                break
            time.sleep(0.1)
        for query in queries:
            stop_between_batches(query)
    if errors:
        raise SystemExit(f"demo: the capture failed: {errors[0]}")
    _print_sales(tail.sales, "(read from the topic)")
    matches = _totals(tail.sales) == expected
    print(f"category_sales equals the same GROUP BY on PostgreSQL: {matches}")
    known = sum(1 for v in tail.clicks.values() if v.get("name") is not None)
    print(
        f"enriched_clicks: {len(tail.clicks):,} clicks, {known:,} with the user's profile "
        f"as of the click; every click enriched once: "
        f"{len(tail.clicks) == summary.per_topic['clicks']}"
    )
    sample = next(iter(tail.clicks.values()), None)
    if sample is not None:
        print(f"  e.g. {json.dumps(sample)}")
