"""The ``riverbed`` PySpark data source, both halves: Spark's Kafka source and sink.

Registered by :func:`riverbed.spark.register`. Options, schema and behaviour follow Spark's
built-in Kafka connector (``format("kafka")``), so a job moves between the two by changing
one word; the data source talks to the broker only through a Kafka client (confluent-kafka),
so it works unchanged against a Kafka cluster. Reading: :mod:`riverbed.spark.source`;
writing, exactly once with the broker's transactions: :mod:`riverbed.spark.sink`.

When: Spark instantiates this class on the driver for every query plan (and pickles it);
each method below is called once per plan.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from riverbed.spark.sink import BatchWriter, StreamWriter
from riverbed.spark.source import BatchReader, StreamReader
from riverbed.spark.source.schema import source_schema

__all__ = ["SOURCE_NAME", "RiverbedDataSource"]

SOURCE_NAME = "riverbed"


class RiverbedDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("riverbed")``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        include = str(self.options.get("includeHeaders", "false")).lower() == "true"
        return source_schema(include_headers=include)

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(dict(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(dict(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return BatchWriter(dict(self.options), schema, overwrite=overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return StreamWriter(dict(self.options), schema)
