"""The rows the ``riverbed`` source produces: the schema of Spark's Kafka source.

``key binary, value binary, topic string, partition int, offset long, timestamp timestamp,
timestampType int`` and, with ``includeHeaders=true``,
``headers array<struct<key: string, value: binary>>`` (Spark's KafkaRecordToRowConverter).
:func:`arrow_schema` is the same as Arrow: ``read()`` yields record batches that must equal
PySpark's ``to_arrow_schema(schema, timezone="UTC")`` exactly, nullability included.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = ["arrow_schema", "source_schema"]


def source_schema(*, include_headers: bool) -> StructType:
    fields = [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
    ]
    if include_headers:
        header = StructType(
            [StructField("key", StringType(), True), StructField("value", BinaryType(), True)]
        )
        fields.append(StructField("headers", ArrayType(header, True), True))
    return StructType(fields)


def arrow_schema(*, include_headers: bool) -> pa.Schema:
    """What ``read()`` yields; equal to PySpark's conversion of :func:`source_schema`."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
        fields.append(pa.field("headers", pa.list_(header)))
    return pa.schema(fields)
