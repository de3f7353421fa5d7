"""Errors of the ``riverbed`` data source.

    SourceError                       anything the source refuses or cannot do
    ├── SourceOptionError (ValueError)  a bad option: the message names it and what is allowed
    └── DataLossError                   offsets the query needs are gone (``failOnDataLoss``)

Spark shows them inside its own exception (``StreamingQueryException``, ``PythonException``)
with the message intact; they carry no Spark types so that pure logic stays testable
without a SparkSession.
"""

from __future__ import annotations

__all__ = ["DataLossError", "SourceError", "SourceOptionError"]


class SourceError(Exception):
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
