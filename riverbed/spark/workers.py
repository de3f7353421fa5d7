"""The check :func:`riverbed.spark.register` runs: can Spark's Python workers import riverbed?

Spark runs the data source's code in Python worker processes, and starts them with the
interpreter that ``PYSPARK_PYTHON`` names when the session starts (``spark-submit`` also
reads ``spark.pyspark.python``); without either, it runs ``python3`` from the PATH, which is
not the virtualenv a job was started from. A worker that cannot import riverbed fails the
first query, deep inside Spark, with a worker's traceback (a ``PYTHON_DATA_SOURCE_ERROR``
around ``ModuleNotFoundError: No module named 'riverbed'``). :func:`check_workers` asks
first: a job of one task whose worker imports what the data source's code needs
(:data:`WORKER_MODULE`) and answers with its interpreter and the import's error, if any. A
job, rather than a look at the settings, also covers a cluster's executors.

The worker's function is pickled by value (it is a nested function), so unpickling it needs
nothing of riverbed: the task succeeds either way, and no worker traceback is logged.

Cost, measured on 2 cores with ``local[2]`` (three runs each): a session's first
``register`` takes 3.8-4.4 s instead of 1.2 s, but its first query then starts 1.3 s sooner
(the worker daemon is up, and a reused worker has imported the data source), so a session
is ready 1.2-1.9 s later; every later ``register`` in the session adds 0.1-0.2 s.
"""

from __future__ import annotations

import re
import sys

from pyspark.sql import SparkSession
from pyspark.sql.functions import udf
from pyspark.sql.types import StringType

from riverbed.spark.errors import WorkerSetupError

__all__ = ["WORKER_MODULE", "check_workers", "failure_reason"]

WORKER_MODULE = "riverbed.spark.datasource"
"""What a worker imports to run the data source: riverbed and its dependencies (pyarrow,
confluent-kafka), as unpickling the data source's readers and writers does."""

REASON_CHARS = 300
"""How much of a failed job's reason goes into the error, at most."""

_EXCEPTION = re.compile(r"(?:[\w$]+\.)*([\w$]*(?:Error|Exception)): ")
"""``java.io.IOException: `` or ``pyspark.errors....PySparkRuntimeError: `` in a message."""


def check_workers(spark: SparkSession) -> None:
    """Raise :class:`WorkerSetupError` unless ``spark``'s Python workers can import
    :data:`WORKER_MODULE`. Runs one Spark job of one task."""

    def probe() -> str:
        # Runs on a worker, where riverbed may be missing: it imports what it uses itself,
        # and cloudpickle sends the one global it reads (WORKER_MODULE) by value.
        import importlib
        import sys

        try:
            importlib.import_module(WORKER_MODULE)
        except Exception as e:  # any failure to import is the answer
            return f"{sys.executable}\n{type(e).__name__}: {' '.join(str(e).split())}"
        return f"{sys.executable}\n"

    one_task = spark.range(0, 1, 1, numPartitions=1)
    try:
        row = one_task.select(udf(probe, StringType(), useArrow=False)()).first()
    except Exception as e:  # the workers do not start at all (no such Python, ...)
        reason = failure_reason(str(e)) or type(e).__name__
        raise WorkerSetupError(
            f"Spark's Python workers cannot run ({reason}): {_advice()}"
        ) from None
    assert row is not None
    executable, _, error = str(row[0]).partition("\n")
    if error:
        raise WorkerSetupError(
            f"Spark's Python workers run {executable}, which cannot import riverbed ({error}): "
            f"{_advice()}"
        )


def failure_reason(message: str) -> str:
    """The innermost ``Type: text`` of the first line of a failed job's ``message`` that has
    one (Spark wraps the cause in its own exceptions, on that line or in a traceback), or
    the first line: e.g. ``IOException: Cannot run program "python9": error=2, ...``."""
    lines = [line for line in message.splitlines() if line.strip()]
    for line in lines:
        if line[0].isspace():  # a frame of a Java or Python stack
            continue
        causes = list(_EXCEPTION.finditer(line))
        if causes:
            return f"{causes[-1].group(1)}: {line[causes[-1].end() :]}"[:REASON_CHARS]
    return lines[0].strip()[:REASON_CHARS] if lines else ""


def _advice() -> str:
    return (
        "set PYSPARK_PYTHON (or spark.pyspark.python, with spark-submit) to a Python that has "
        f"riverbed installed, e.g. {sys.executable}, before the Spark session starts"
    )
