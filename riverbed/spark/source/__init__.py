"""The reading half of the ``riverbed`` data source: Spark's Kafka source, in Python.

- :mod:`~riverbed.spark.source.reader`: :class:`BatchReader` and :class:`StreamReader`, the
  classes Spark calls, and where each of their methods runs;
- :mod:`~riverbed.spark.source.options`: the options (those of ``format("kafka")``), parsed
  and checked;
- :mod:`~riverbed.spark.source.offsets`: per-partition offsets, their JSON and offset ranges
  (pure);
- :mod:`~riverbed.spark.source.admission`: how far one micro-batch may read (pure);
- :mod:`~riverbed.spark.source.kafka_client`: the driver's client, which partitions a query
  reads and where they begin and end;
- :mod:`~riverbed.spark.source.range_reader`: an executor's read of one offset range into
  Arrow record batches;
- :mod:`~riverbed.spark.source.schema`: the rows' schema, Spark's and Arrow's.
"""

from __future__ import annotations

from riverbed.spark.source.reader import BatchReader, StreamReader

__all__ = ["BatchReader", "StreamReader"]
