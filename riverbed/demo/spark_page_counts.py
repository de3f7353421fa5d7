"""The demo's Spark section: clicks per page with the ``riverbed`` data source.

A Structured Streaming query reads the demo's ``clicks`` topic from the beginning
(``Trigger.AvailableNow``), counts clicks per page and writes the counts to the topic
``page-counts`` through the riverbed sink (one Kafka transaction per task, exactly once),
in complete mode: the topic is a changelog whose last record per page is its count. The
demo then reads that topic back with a read_committed consumer and compares it with the
same count done in plain Python over the topic (on a thread of its own while the query
runs: it reads and parses every click, 2-3 s for 200,000).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from riverbed.testing.topic_reader import read_to_end

__all__ = ["COUNTS_TOPIC", "count_pages"]

COUNTS_TOPIC = "page-counts"


def _read_all(bootstrap: str, topic: str, *, partitions: int) -> list[tuple[bytes, bytes]]:
    """(key, value) of every record of ``topic``, read_committed, to the end."""
    records = read_to_end(bootstrap, topic, partitions=partitions)
    return [(record.key or b"", record.value or b"") for record in records]


def _python_count(bootstrap: str, topic: str, *, partitions: int) -> Counter[str]:
    """Clicks per page of ``topic``, in plain Python."""
    events = [json.loads(value) for _, value in _read_all(bootstrap, topic, partitions=partitions)]
    return Counter(event["page"] for event in events if "page" in event)


def count_pages(spark: SparkSession, bootstrap: str, *, topic: str, partitions: int) -> None:
    """Count ``topic``'s clicks per page with Spark into :data:`COUNTS_TOPIC`, then check
    the counts against plain Python."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="demo-python-count") as counting:
        expected = counting.submit(_python_count, bootstrap, topic, partitions=partitions)
        _count_with_spark(spark, bootstrap, topic=topic)
    latest = {
        key.decode(): int(value) for key, value in _read_all(bootstrap, COUNTS_TOPIC, partitions=1)
    }
    for page, count in sorted(latest.items()):
        print(f"  {page:<12} {count:>8,}")
    print(f"equal to a plain Python count of the topic: {latest == dict(expected.result())}")


def _count_with_spark(spark: SparkSession, bootstrap: str, *, topic: str) -> None:
    clicks = (
        spark.readStream.format("riverbed")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    counts = (
        clicks.select(F.get_json_object(F.col("value").cast("string"), "$.page").alias("page"))
        .where(F.col("page").isNotNull())  # the group section's "late" events have none
        .groupBy("page")
        .count()
        .select(F.col("page").alias("key"), F.col("count").cast("string").alias("value"))
    )
    with tempfile.TemporaryDirectory() as checkpoint:
        started = time.perf_counter()
        query = (
            counts.writeStream.format("riverbed")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", COUNTS_TOPIC)
            .option("checkpointLocation", str(Path(checkpoint) / "page-counts"))
            .outputMode("complete")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        seconds = time.perf_counter() - started
        rows = sum(p["numInputRows"] for p in query.recentProgress)
    print(
        f"query read {rows:,} records of {topic!r} in {seconds:.1f} s (start-up included) and "
        f"wrote the counts per page to {COUNTS_TOPIC!r} exactly once"
    )
