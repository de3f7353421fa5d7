"""The writing half of the ``riverbed`` data source: Spark's Kafka sink, exactly once.

- :mod:`~riverbed.spark.sink.writer`: :class:`BatchWriter` and :class:`StreamWriter`, the
  classes Spark calls, and where each of their methods runs;
- :mod:`~riverbed.spark.sink.config`: the input columns and options (those of Spark's Kafka
  sink), checked on the driver into a :class:`~riverbed.spark.sink.config.SinkPlan`;
- :mod:`~riverbed.spark.sink.task`: one write task, its rows and its progress in one Kafka
  transaction, and why that is exactly once, crash by crash;
- :mod:`~riverbed.spark.sink.rows`: Arrow record batches to ``Producer.produce`` calls.
"""

from __future__ import annotations

from riverbed.spark.sink.writer import BatchWriter, StreamWriter

__all__ = ["BatchWriter", "StreamWriter"]
