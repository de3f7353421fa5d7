"""The operators' inputs, taken from the riverbed source's DataFrame (Spark's Kafka schema:
``key``, ``value``, ``topic``, ``partition``, ``offset``, ...), which may subscribe several
topics at once, and event time declared on them.

- :func:`json_events`: the events of one topic, parsed once with ``from_json`` (a record
  that is not a JSON object gives nulls, which the operators leave out);
- :func:`changes`: the records of one CDC topic (Debezium's envelope, DESIGN.md) as strings,
  with the primary-key column to group them by and the position that orders them
  (``partition``, ``offset``: every change of a key is in one partition, in commit order).
  Operators parse them with :func:`riverbed.pipelines.operators.changelog.parse_change`;
- :func:`with_event_time`: the watermark declared on an integer time column, and
  :func:`delay_ms`, its delay in milliseconds as Spark counts it.

**Watermarks, and why the event-time column is dropped.** :func:`with_event_time` declares
the watermark on a timestamp column and then drops that column again. Spark still computes
the watermark (the maximum event time seen in earlier micro-batches minus the delay) and
hands it to the operator, but with the watermarked column in its input a stateful operator
silently discards the rows older than the watermark before user code sees them. Without it
the operator sees every row and decides itself what a late row means (counted elsewhere,
sent to a side output with the reason, reported).
"""

from __future__ import annotations

import re
from decimal import Decimal

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

__all__ = ["changes", "delay_ms", "json_events", "of_topic", "with_event_time"]


def of_topic(source: DataFrame, topic: str) -> DataFrame:
    """The source's records of ``topic`` (a source may subscribe several topics)."""
    return source.where(F.col("topic") == F.lit(topic))


def json_events(source: DataFrame, topic: str, schema: StructType) -> DataFrame:
    """The events of ``topic``: one column per field of ``schema``, parsed once, even when
    the caller filters on the fields.

    A filter on the fields of a projection ``from_json(...).*`` is pushed below it by
    Spark's optimizer, with the parse substituted into each condition: every record was
    parsed once per condition and once more for the projection (``fraud_alerts``' four
    conditions made five parses). The struct is therefore taken apart by a generator,
    ``inline`` of a one-element array, which no filter is pushed through; it yields the
    same rows (one per record, all null where the value is not a JSON object) and costs no
    more than the projection (BENCHMARKS.md)."""
    parsed = F.from_json(F.col("value").cast("string"), schema)
    return of_topic(source, topic).select(F.inline(F.array(parsed)))


def changes(source: DataFrame, topic: str, key_column: str) -> DataFrame:
    """The change records of ``topic``: ``key_column`` (taken from the record's key, the
    JSON of the primary key), ``key`` and ``value`` (strings; ``value`` is null for a
    tombstone), ``partition`` and ``offset``."""
    key = F.col("key").cast("string")
    return of_topic(source, topic).select(
        F.get_json_object(key, f"$.{key_column}").alias(key_column),
        key.alias("key"),
        F.col("value").cast("string").alias("value"),
        F.col("partition"),
        F.col("offset"),
    )


def with_event_time(events: DataFrame, delay: str, ts_column: str = "ts") -> DataFrame:
    """Declare the watermark (``delay`` behind the latest event time, a Spark interval
    such as ``"2 minutes"``) on ``ts_column`` (epoch ms), keeping the column a plain
    integer (module docstring)."""
    return (
        events.withColumn("_event_time", F.timestamp_millis(F.col(ts_column)))
        .withWatermark("_event_time", delay)
        .drop("_event_time")
    )


_UNIT_MS = {
    "microsecond": Decimal("0.001"),
    "millisecond": Decimal(1),
    "second": Decimal(1_000),
    "minute": Decimal(60_000),
    "hour": Decimal(3_600_000),
    "day": Decimal(86_400_000),
    "week": Decimal(7 * 86_400_000),
    "month": Decimal(31 * 86_400_000),  # as Spark counts a watermark's month
    "year": Decimal(12 * 31 * 86_400_000),
}
_PART = r"([0-9]+(?:\.[0-9]+)?)\s*([a-z]+)\s*"
_DELAY = re.compile(f"(?:{_PART})+", re.ASCII)


def delay_ms(delay: str) -> int:
    """A watermark's ``delay`` (a Spark interval such as ``"2 minutes"`` or ``"interval 1
    hour 30 minutes"``) in whole milliseconds, as Spark's ``withWatermark`` counts it (a
    month is 31 days); ValueError for any other text."""
    text = delay.strip().lower().removeprefix("interval").lstrip()
    parts = re.findall(_PART, text, re.ASCII) if _DELAY.fullmatch(text) else []
    refused = ValueError(f"not a watermark delay: {delay!r} (expected e.g. '2 minutes')")
    if not parts:
        raise refused
    total = Decimal(0)
    for number, unit in parts:
        unit_ms = _UNIT_MS.get(unit.removesuffix("s"))
        if unit_ms is None:
            raise refused
        total += Decimal(number) * unit_ms
    return int(total)
