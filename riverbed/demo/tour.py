"""The demo's sections in order, around one broker (``python -m riverbed.demo`` runs :func:`run`).

The broker runs in this process on a free port, its data in ``data_dir`` (emptied first, kept
afterwards, to look at). The slow starts overlap the sections before the ones that need them:
once the throughput sections are done, Spark (its JVM, a session, and the one-task job with
which :func:`riverbed.spark.register` checks the Python workers) and the private PostgreSQL
cluster start on threads of their own while the group and exactly-once sections run. One
Spark session serves the Spark, pipeline and CDC sections. Spark and PostgreSQL stop before
the broker does, so that no client is left talking to a broker that went away.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from pyspark.sql import SparkSession

import riverbed.spark
from riverbed.broker import Broker
from riverbed.demo import carts, derived_data, shop_cdc, shop_pipelines
from riverbed.demo.clickstream import PARTITIONS, TOPIC, click_events, consume_back, create_topic
from riverbed.demo.clickstream import produce as produce_clicks
from riverbed.demo.console import section
from riverbed.demo.consumer_group import GROUP, MORE_EVENTS, share_in_a_group
from riverbed.demo.exactly_once import EOS_TOPIC, copy_exactly_once
from riverbed.demo.on_disk import show_data_dir
from riverbed.demo.spark_page_counts import count_pages
from riverbed.testing.postgres import PostgresCluster

__all__ = ["run"]

T = TypeVar("T")

SPARK_MASTER = "local[2]"

TRY_IT = (
    ".venv/bin/riverbed broker --data-dir data/broker   # a broker on 127.0.0.1:9092",
    ".venv/bin/riverbed topics create --topic clicks --partitions 3",
    "echo 'u1:hello' | .venv/bin/riverbed produce --topic clicks --key-separator :",
    ".venv/bin/riverbed consume --topic clicks --from-beginning --exit-at-end",
    ".venv/bin/riverbed consume --topic clicks --group readers --from-beginning",
    ".venv/bin/riverbed groups describe readers",
    ".venv/bin/riverbed consume --topic clicks --isolation-level read_committed",
    ".venv/bin/riverbed transactions list",
)


def _start_spark() -> tuple[SparkSession, float]:
    started = time.perf_counter()
    spark = riverbed.spark.session("riverbed-demo", master=SPARK_MASTER, log_level="ERROR")
    return spark, time.perf_counter() - started


def _activate_here(spark: SparkSession) -> None:
    """Make ``spark``, started on another thread, the active session of this one.

    PySpark pins each Python thread to a JVM thread, the JVM keeps the active session per
    thread, and starting a streaming query that writes looks a Python data source up in the
    thread's active session: here, without it, ``writeStream.format("riverbed").start()``
    fails with DATA_SOURCE_NOT_FOUND (Spark 4.3). PySpark has no public call for it."""
    jvm = spark._jvm
    assert jvm is not None
    jvm.SparkSession.setActiveSession(spark._jsparkSession)


def _stop(start: Future[T] | None, stop: Callable[[T], None]) -> None:
    """Stop what ``start`` started, once it has (nothing, if it failed)."""
    if start is not None and start.exception() is None:
        stop(start.result())


def run(data_dir: Path, *, count: int, shop_seconds: float) -> None:
    """The whole demo: ``count`` click events, the shop in real time for ``shop_seconds``."""
    if data_dir.exists():
        shutil.rmtree(data_dir)
    # Both readers of the group section join within the initial rebalance delay, so the
    # group starts with both (Kafka's default delay is 3 s; 1 s keeps the demo brisk).
    config = {"group.initial.rebalance.delay.ms": "1000"}
    with (
        Broker(data_dir, listen="127.0.0.1:0", config=config) as broker,
        ThreadPoolExecutor(max_workers=2, thread_name_prefix="demo-start") as starting,
    ):
        bootstrap = broker.bootstrap_servers
        spark_start: Future[tuple[SparkSession, float]] | None = None
        postgres_start: Future[PostgresCluster] | None = None
        try:
            with section("broker"):
                print(f"riverbed broker running in-process on {bootstrap}, data in {data_dir}")
                if broker.metrics_url is not None:
                    print(f"Prometheus metrics at {broker.metrics_url}")
            with section(f"topic {TOPIC!r} with {PARTITIONS} partitions"):
                create_topic(bootstrap)
            with section(f"produce {count:,} click events (idempotent, acks=all, lz4)"):
                producer = produce_clicks(bootstrap, click_events(count, seed=7))
            with section("consume them back from the beginning"):
                total = consume_back(bootstrap)

            # The sections from here on measure no throughput: the slow starts overlap them.
            spark_start = starting.submit(_start_spark)
            postgres_start = starting.submit(PostgresCluster.start)

            with section(f"two consumers share {TOPIC!r} in consumer group {GROUP!r}"):
                share_in_a_group(bootstrap, total=total, producer=producer)
            producer.close()
            with section(
                f"exactly once: {TOPIC!r} -> {EOS_TOPIC!r}, one transaction per 5,000 clicks"
            ):
                copy_exactly_once(bootstrap, total=total + MORE_EVENTS)
            with section(
                "event sourcing: the shop's carts, commands decided into events on the log"
            ):
                carts.run(bootstrap)

            with section("Spark: clicks per page, a streaming query on the riverbed data source"):
                waited = time.perf_counter()
                spark, start_s = spark_start.result()
                _activate_here(spark)
                print(
                    f"Spark {spark.version} on {SPARK_MASTER} started in {start_s:.1f} s, in "
                    f"the background (waited {time.perf_counter() - waited:.1f} s for it)"
                )
                count_pages(spark, bootstrap, topic=TOPIC, partitions=PARTITIONS)

            with section(
                "the shop workload through page_views_per_minute (event-time windows, late "
                "data) and fraud_alerts (CEP)"
            ):
                shop_pipelines.run(spark, bootstrap, count=min(4 * count, 30_000))

            with section("the shop's PostgreSQL through CDC: enriched_clicks and category_sales"):
                shop_cdc.run(spark, postgres_start.result(), bootstrap, seconds=shop_seconds)

            with section(
                "derived data: a cache, a search index and DuckDB follow the log; dual writes "
                "do not"
            ):
                derived_data.run(postgres_start.result(), bootstrap, data_dir / "derived")
        finally:
            _stop(spark_start, lambda started: started[0].stop())
            _stop(postgres_start, PostgresCluster.stop)

    with section("on disk (Kafka's layout)"):
        show_data_dir(data_dir)

    print("\n== try it yourself")
    for line in TRY_IT:
        print(f"  {line}")
