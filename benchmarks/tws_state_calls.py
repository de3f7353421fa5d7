"""What one state call of PySpark's ``transformWithStateInPandas`` costs, on local[2].

    .venv/bin/python benchmarks/tws_state_calls.py [--keys 40000] [--groups 8] [--batches 4]
        [--value-bytes 100]

Why riverbed's per-key operators group by a hash bucket
(:mod:`riverbed.pipelines.operators.buckets`): PySpark runs the processor in a Python
worker and every state access is a round trip over a socket to the JVM. This measures,
inside ``handleInputRows``, the time per ``MapState.getValue`` (of a key not yet written)
and per ``updateValue`` (a value of ``--value-bytes`` characters), and the fixed cost
of a group (a query whose every key is a group of its own, against one with ``--groups``
groups, over the same records). ``--keys`` records (distinct keys) are written as Parquet
files, ``--batches`` files read one per micro-batch (``maxFilesPerTrigger`` 1), the RocksDB
state store, ``spark.sql.shuffle.partitions`` 2. The first batch (the Python workers
start, the JVM warms up) is printed apart. Not part of the test run; results go in
BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

import riverbed.spark


class TimedMapState(StatefulProcessor):
    """Reads and writes one map state entry per input row, timing the calls into
    ``log`` (one JSON line per call of handleInputRows: rows, get seconds, update seconds)."""

    def __init__(self, log: str, value_bytes: int) -> None:
        self.log = log
        self.value = "x" * value_bytes

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.map = handle.getMapState("m", "key STRING", "value STRING")

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        keys = pd.concat(list(rows))["k"].tolist()
        t0 = time.perf_counter()
        for k in keys:
            self.map.getValue((k,))
        t1 = time.perf_counter()
        for k in keys:
            self.map.updateValue((k,), (self.value,))
        t2 = time.perf_counter()
        with open(self.log, "a", encoding="utf-8") as f:
            f.write(json.dumps([len(keys), t1 - t0, t2 - t1]) + "\n")
        yield pd.DataFrame({"n": [len(keys)]})

    def close(self) -> None:
        pass


def run(
    spark: SparkSession,
    source: DataFrame,
    group: str,
    processor: TimedMapState,
    checkpoint: Path,
) -> list[float]:
    """The query's batch durations (ms), grouped by ``group``."""
    query = (
        source.groupBy(group)
        .transformWithStateInPandas(processor, "n LONG", "append", "None")
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return [
        float(p["durationMs"]["triggerExecution"])
        for p in query.recentProgress
        if p["numInputRows"] > 0
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=40_000, help="input records (distinct keys)")
    parser.add_argument("--groups", type=int, default=8, help="groups of the bucketed query")
    parser.add_argument("--batches", type=int, default=4, help="micro-batches")
    parser.add_argument("--value-bytes", type=int, default=100, help="size of each value written")
    args = parser.parse_args()
    spark = riverbed.spark.session(
        "tws-state-calls", master="local[2]", config={"spark.sql.shuffle.partitions": "2"}
    )
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "in"
        (
            spark.range(args.keys)
            .select(
                F.col("id").cast("string").alias("k"),
                (F.col("id") % args.groups).cast("int").alias("b"),
            )
            .repartition(args.batches)
            .write.parquet(str(data))
        )
        source = (
            spark.readStream.schema("k STRING, b INT")
            .option("maxFilesPerTrigger", 1)
            .parquet(str(data))
        )
        per_record: dict[str, float] = {}
        for group, what in (("b", f"{args.groups} groups"), ("k", "one group per key")):
            log = Path(tmp) / f"{group}.log"
            processor = TimedMapState(str(log), args.value_bytes)
            durations = run(spark, source, group, processor, Path(tmp) / f"checkpoint-{group}")
            per_record[group] = statistics.median(durations[1:]) * 1e3 / (args.keys / args.batches)
            print(f"{what}: batches of {args.keys // args.batches:,} records took "
                  f"{', '.join(f'{d:,.0f}' for d in durations)} ms (the first starts up); "
                  f"after the first, {per_record[group]:.0f} µs per record")  # fmt: skip
            if group == "b":
                warm = [json.loads(line) for line in log.read_text().splitlines()][args.groups :]
                gets = statistics.median(g / n * 1e6 for n, g, _ in warm)
                updates = statistics.median(u / n * 1e6 for n, _, u in warm)
                print(f"  per state call, median over {len(warm)} groups after the first "
                      f"batch: getValue {gets:.0f} µs, updateValue {updates:.0f} µs")  # fmt: skip
        print(
            f"fixed cost of a group: about {per_record['k'] - per_record['b']:.0f} µs "
            "(per record, one group per key less bucketed)"
        )
    spark.stop()


if __name__ == "__main__":
    main()
