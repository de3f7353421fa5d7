"""What a pipeline is, for ``riverbed pipeline run`` (:mod:`riverbed.pipelines.runner`): its
input topics, the topics it writes, and how it turns the source into rows for the sink."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["Pipeline"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Pipeline:
    """A Spark pipeline over the log, by name."""

    name: str
    description: str
    """What it computes, for ``riverbed pipeline list``."""
    inputs: tuple[str, ...]
    """The topics the riverbed source subscribes to."""
    outputs: tuple[str, ...]
    """The topics it writes (created, compacted, if missing)."""
    build: Callable[[DataFrame], DataFrame]
    """The source's DataFrame (Spark's Kafka schema) to rows for the riverbed sink
    (``topic``, ``key``, ``value``)."""
