"""What Spark costs around a riverbed operator: ``fraud_alerts``' query with its operator
replaced by one that does nothing, on local[2].

    .venv/bin/python benchmarks/tws_floor.py [--payments 1000000]
        [--max-offsets 10000 100000 500000] [--cache FILE]

``benchmarks/pipelines_joins.py`` measures the pipelines whole. This measures the floor
under them: the same riverbed source and sink, the same payments topic (4 partitions) and
the same query as ``riverbed pipeline run fraud_alerts`` builds, but for the operator.
Each ``--max-offsets`` (``maxOffsetsPerTrigger``, AvailableNow) runs three queries:

- ``parse``: the source and ``fraud_alerts.payments`` (the JSON parse and the filter) with
  the event time and watermark, then a filter no payment passes (``ts < 0``, evaluated per
  record, so nothing is optimised away): what reading and parsing cost;
- ``noop``: the same, grouped by the card's bucket into ``transformWithStateInPandas``
  (EventTime mode, as ``match_pattern`` does) with an operator that takes its rows and
  writes nothing: what Spark's stateful Python operator costs with no work in it;
- ``noop+state``: the same operator reading and writing one small value state per bucket
  and batch.

A warm-up query (``noop``, not counted) comes first. Reported per query: events/s (input
records over the time from ``start()`` to the end), the median micro-batch time, the
processes' CPU seconds. The payments are ``pipelines_joins.py``'s (the same seed); making
1,000,000 takes about 4 minutes, and ``--cache FILE`` keeps them (JSON lines, the file
``pattern_operator.py --cache`` writes). Not part of the test run; results go in
BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine, print_totals, run_to_end, start_broker
from pattern_operator import made_payments
from pipelines_joins import SPARK_CONFIG, batch_records, create_topics, produce

import riverbed.spark
from riverbed.cdc.changes import dumps
from riverbed.pipelines.operators.base import OUTPUT_SCHEMA
from riverbed.pipelines.operators.buckets import BUCKET, bucket_of
from riverbed.pipelines.operators.inputs import with_event_time
from riverbed.pipelines.shop import PIPELINES
from riverbed.pipelines.shop.contract import WATERMARK_DELAY
from riverbed.pipelines.shop.fraud_alerts import payments


class Nothing(StatefulProcessor):
    """Takes a bucket's rows and writes nothing; with ``state``, also reads and writes a
    count of them in a value state."""

    def __init__(self, state: bool) -> None:
        self.state = state

    def init(self, handle: StatefulProcessorHandle) -> None:
        if self.state:
            self.count = handle.getValueState("count", "rows LONG")

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        seen = sum(len(frame) for frame in rows)
        if self.state:
            before = self.count.get()[0] if self.count.exists() else 0
            self.count.update((before + seen,))
        return iter(())


def parsed(source: DataFrame) -> DataFrame:
    return with_event_time(payments(source), WATERMARK_DELAY)


def parse_only(source: DataFrame) -> DataFrame:
    nothing = parsed(source).where(F.col("ts") < 0)
    return nothing.select(
        F.lit("none").alias("topic"),
        F.col("card_id").alias("key"),
        F.lit(None).cast("string").alias("value"),
    )


def operator(state: bool) -> Callable[[DataFrame], DataFrame]:
    def build(source: DataFrame) -> DataFrame:
        rows = parsed(source).withColumn(BUCKET, bucket_of("card_id"))
        return rows.groupBy(BUCKET).transformWithStateInPandas(
            Nothing(state), OUTPUT_SCHEMA, "append", "EventTime"
        )

    return build


QUERIES = {"parse": parse_only, "noop": operator(False), "noop+state": operator(True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--payments", type=int, default=1_000_000)
    parser.add_argument("--max-offsets", type=int, nargs="+", default=[10_000, 100_000, 500_000])
    parser.add_argument("--cache", type=Path, help="keep the payments made in this file")
    args = parser.parse_args()
    print(f"machine: {machine()}", flush=True)
    records = [
        ("payments", dumps({"card_id": p["card_id"]}), dumps(p))
        for p in made_payments(args.payments, args.cache)
    ]
    pipeline = PIPELINES["fraud_alerts"]
    spark = riverbed.spark.session(
        "tws_floor", master="local[2]", log_level="ERROR", config=SPARK_CONFIG
    )
    table: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        process, bootstrap = start_broker(root / "broker")
        try:
            create_topics(bootstrap, "fraud_alerts")
            produce(bootstrap, records)
            runs = [("noop", args.max_offsets[-1], True)] + [
                (name, m, False) for m in args.max_offsets for name in QUERIES
            ]
            for index, (name, max_offsets, warmup) in enumerate(runs):
                query = replace(pipeline, build=QUERIES[name])
                timed = run_to_end(spark, query, bootstrap, root / f"c{index}", max_offsets)
                read = sum(batch_records(b) for b in timed.batches)
                if read != len(records):
                    raise SystemExit(f"{name} read {read:,} records of {len(records):,}")
                ms = [b["durationMs"].get("triggerExecution", 0) for b in timed.batches]
                label = f"{name}, maxOffsetsPerTrigger {max_offsets:,}"
                print(
                    f"{label}{' (warm-up, not counted)' if warmup else ''}: "
                    f"{read / timed.seconds:,.0f} events/s, {len(ms)} batches, median "
                    f"{statistics.median(ms):,.0f} ms",
                    flush=True,
                )
                print_totals(timed.batches, timed.cpu_s, timed.seconds)
                if not warmup:
                    table.append(
                        f"| {name} | {max_offsets:,} | {read / timed.seconds:,.0f} | "
                        f"{statistics.median(ms):,.0f} | {timed.cpu_s['JVM']:.1f} | "
                        f"{timed.cpu_s['Python workers']:.1f} |"
                    )
        finally:
            process.terminate()
            process.wait(60)
            spark.stop()
    print(
        "\n| query | maxOffsetsPerTrigger | events/s | median batch ms | JVM CPU-s | "
        "Python workers CPU-s |"
    )
    print("|---|---|---|---|---|---|")
    print("\n".join(table))


if __name__ == "__main__":
    main()
