"""The pipelines' inputs, taken from the riverbed source's DataFrame (Spark's Kafka schema:
``key``, ``value``, ``topic``, ``partition``, ``offset``, ...), which may subscribe several
topics at once.

- :func:`json_events`: the events of one topic, parsed once with ``from_json`` (a record
  that is not a JSON object gives nulls, which the operators leave out);
- :func:`changes`: the records of one CDC topic (Debezium's envelope, DESIGN.md) as strings,
  with the primary-key column to group them by and the position that orders them
  (``partition``, ``offset``: every change of a key is in one partition, in commit order).
  Operators parse them with :func:`riverbed.pipelines.changelog.parse_change`.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

__all__ = ["WATERMARK_DELAY", "changes", "json_events"]

WATERMARK_DELAY = "2 minutes"
"""DESIGN.md: every pipeline uses event time with a watermark 2 minutes behind the latest
event time seen."""


def json_events(source: DataFrame, topic: str, schema: StructType) -> DataFrame:
    """The events of ``topic``: one column per field of ``schema``, parsed once (a filter
    on the fields here would be pushed below the parse and parse again per condition)."""
    own = source.where(F.col("topic") == F.lit(topic))
    parsed = own.select(F.from_json(F.col("value").cast("string"), schema).alias("e"))
    return parsed.select("e.*")


def changes(source: DataFrame, topic: str, key_column: str) -> DataFrame:
    """The change records of ``topic``: ``key_column`` (taken from the record's key, the
    JSON of the primary key), ``key`` and ``value`` (strings; ``value`` is null for a
    tombstone), ``partition`` and ``offset``."""
    key = F.col("key").cast("string")
    return source.where(F.col("topic") == F.lit(topic)).select(
        F.get_json_object(key, f"$.{key_column}").alias(key_column),
        key.alias("key"),
        F.col("value").cast("string").alias("value"),
        F.col("partition"),
        F.col("offset"),
    )
