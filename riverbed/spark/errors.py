"""Errors of the ``riverbed`` data source, one hierarchy for reading and writing.

    RiverbedSparkError                    anything the data source refuses or cannot do
    ├── WorkerSetupError                  Spark's Python workers cannot import riverbed
    │                                     (raised by register(): the message says what to set)
    ├── SourceError                       ... when reading
    │   ├── SourceOptionError (ValueError)  a bad option: the message names it
    │   └── DataLossError                   offsets the query needs are gone (failOnDataLoss)
    └── SinkError                         ... when writing
        ├── SinkOptionError (ValueError)    a bad option or input column
        ├── SinkDataError (ValueError)      a row that cannot be written as it is
        └── SinkWriteError                  the broker refused the rows or their transaction

Spark shows them inside its own exception (``StreamingQueryException``, ``PythonException``)
with the message intact; they carry no Spark types so that pure logic stays testable
without a SparkSession.
"""

from __future__ import annotations


class RiverbedSparkError(Exception):
    """Base class of every error the ``riverbed`` data source raises on purpose."""


class WorkerSetupError(RiverbedSparkError):
    """Spark's Python workers cannot import riverbed: the message names their interpreter and
    says what to set (``PYSPARK_PYTHON``) instead."""


class SourceError(RiverbedSparkError):
    """The ``riverbed`` source cannot do what was asked."""


class SourceOptionError(SourceError, ValueError):
    """An option of ``spark.read(Stream).format("riverbed")`` is missing, unknown or invalid
    (the user's fault: the message names the option)."""


class DataLossError(SourceError):
    """Records the query has not read are gone from the broker (retention, DeleteRecords, a
    deleted topic or partition). Raised only with ``failOnDataLoss=true``, Spark's default."""

    HINT = (
        " Some data may have been lost because it is not available in the broker any more:"
        " it was aged out by retention, deleted with DeleteRecords, or the topic was deleted"
        " before the query read it. If you don't want your query to fail in such cases, set"
        ' the source option "failOnDataLoss" to "false".'
    )

    def __init__(self, message: str) -> None:
        super().__init__(message + self.HINT)


class SinkError(RiverbedSparkError):
    """The ``riverbed`` sink cannot do what was asked."""


class SinkOptionError(SinkError, ValueError):
    """A sink option or input column is missing or has the wrong type (the user's fault; the
    message names it)."""


class SinkDataError(SinkError, ValueError):
    """A row cannot be written as it is (e.g. its topic is null and no ``topic`` option)."""


class SinkWriteError(SinkError):
    """The broker refused the rows or their transaction; the task fails and Spark retries."""
