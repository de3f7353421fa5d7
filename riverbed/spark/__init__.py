"""riverbed on Apache Spark: the ``riverbed`` data source and a ready SparkSession.

    import riverbed.spark
    spark = riverbed.spark.session()              # local[*], riverbed registered
    # or, with a session of your own:
    riverbed.spark.register(spark)
    df = (spark.readStream.format("riverbed")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "clicks")
          .load())

The data source mirrors Spark's Kafka connector, so a job moves to ``format("kafka")`` by
changing one word. Its parts:

- :mod:`riverbed.spark.datasource`: the data source Spark registers (both halves);
- :mod:`riverbed.spark.source`: reading, batch and streaming (Spark's Kafka source);
- :mod:`riverbed.spark.sink`: writing, exactly once with Kafka transactions (unlike Spark's
  Kafka sink, which is at-least-once);
- :mod:`riverbed.spark.workers`: the check :func:`register` runs first, that Spark's Python
  workers can import riverbed (:class:`WorkerSetupError` says what to set if not);
- :mod:`riverbed.spark.jvm`: how :func:`session` starts Spark's JVM without its start-up
  noise (``log4j2.properties`` beside it is the driver's log4j configuration);
- :mod:`riverbed.spark.errors`: the one exception hierarchy, rooted at
  :class:`RiverbedSparkError`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark import SparkConf
from pyspark.sql import SparkSession

from riverbed.spark.datasource import SOURCE_NAME, RiverbedDataSource
from riverbed.spark.errors import (
    DataLossError,
    RiverbedSparkError,
    SinkDataError,
    SinkError,
    SinkOptionError,
    SinkWriteError,
    SourceError,
    SourceOptionError,
    WorkerSetupError,
)
from riverbed.spark.jvm import log4j_settings, start_jvm
from riverbed.spark.workers import check_workers

__all__ = [
    "SOURCE_NAME",
    "DataLossError",
    "RiverbedSparkError",
    "SinkDataError",
    "SinkError",
    "SinkOptionError",
    "SinkWriteError",
    "SourceError",
    "SourceOptionError",
    "WorkerSetupError",
    "register",
    "session",
]

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
"""transformWithState needs it, and it keeps large state off the JVM heap; Spark 4.3's
default is still the HDFS-backed (in-heap) provider."""


def register(spark: SparkSession) -> None:
    """Make ``format("riverbed")`` available in ``spark`` (idempotent).

    First it checks that Spark's Python workers can import riverbed, with a job of one task
    (:func:`~riverbed.spark.workers.check_workers`), and raises :class:`WorkerSetupError` if
    they cannot: one line naming their interpreter and what to set, instead of a worker's
    traceback at the first query."""
    check_workers(spark)
    spark.dataSource.register(RiverbedDataSource)


def _on_loopback(master: str) -> bool:
    """``spark://127.0.0.1:7077``, ``spark://localhost:7077``: a cluster on this machine."""
    host = master.partition("://")[2].rpartition(":")[0]
    return host in ("127.0.0.1", "localhost", "[::1]")


def session(
    app_name: str = "riverbed",
    *,
    master: str | None = None,
    config: Mapping[str, str] | None = None,
    log_level: str = "WARN",
) -> SparkSession:
    """A SparkSession with riverbed registered (:func:`register`, which checks the Python
    workers) and local defaults that suit one machine:

    - ``master``: ``local[N]`` with N = the machine's cores, unless given (or set through
      ``spark-submit``/``PYSPARK_SUBMIT_ARGS``, which win as usual);
    - the RocksDB state store, with changelog checkpointing;
    - ``spark.sql.shuffle.partitions`` = the cores (Spark's 200 makes every stateful
      micro-batch run 200 tiny tasks on a laptop);
    - UTC session time zone (event time in riverbed is epoch milliseconds, UTC);
    - Python workers run this interpreter (``sys.executable``, so the virtualenv with
      riverbed in it) unless ``PYSPARK_PYTHON`` says otherwise; Spark's own default is
      ``python3`` on the PATH, which cannot import riverbed; with a local master, or a
      cluster's on loopback (``spark://127.0.0.1:7077``), the driver binds to 127.0.0.1
      unless ``SPARK_LOCAL_IP`` says otherwise;
    - Arrow for pandas conversions, and the log level ``log_level``;
    - no start-up noise: the driver's log4j configuration is riverbed's
      (``spark.driver.extraJavaOptions``, :mod:`riverbed.spark.jvm`), and the JVM's output
      reaches stdout and stderr without the lines that configuration cannot keep out
      (the JVM's incubator-module warning, transformWithState's worker announcements).

    ``config`` entries override these. Against a cluster, pass ``master`` (e.g.
    ``spark://host:7077``) or use ``spark-submit``; nothing else changes. If the workers
    cannot import riverbed, a session this call started is stopped again before
    :class:`WorkerSetupError` reaches the caller.
    """
    cores = os.cpu_count() or 2
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # read when the JVM starts
    if master is None or master.startswith("local") or _on_loopback(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no "resolves to loopback" warning
    settings = {
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.shuffle.partitions": str(cores),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.showConsoleProgress": "false",
        "spark.ui.enabled": "false",
        **log4j_settings(),
        **(config or {}),
    }
    conf = SparkConf().setAppName(app_name)
    if master is not None:
        conf.setMaster(master)
    elif "PYSPARK_SUBMIT_ARGS" not in os.environ:
        conf.setMaster(f"local[{cores}]")
    conf.setAll(list(settings.items()))
    start_jvm(conf)
    existing = SparkSession.getActiveSession()
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    try:
        register(spark)
    except WorkerSetupError:
        if existing is None:  # started here only to fail: no JVM left running
            spark.stop()
        raise
    return spark
