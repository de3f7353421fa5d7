"""A running pipeline's Prometheus metrics, from Spark's progress reports
(:class:`PipelineMetrics`; ``riverbed pipeline run NAME --metrics HOST:PORT`` serves them).

Each micro-batch's progress (``StreamingQueryProgress`` as a dict) moves, labelled with the
pipeline's name:

- ``riverbed_pipeline_batches_total``, ``riverbed_pipeline_input_rows_total``;
- ``riverbed_pipeline_batch_duration_seconds`` (a histogram of ``triggerExecution``);
- ``riverbed_pipeline_rows_per_second``: the last batch's ``processedRowsPerSecond``;
- ``riverbed_pipeline_watermark_seconds``: the event-time watermark, Unix seconds (absent
  before the first batch that sets one);
- ``riverbed_pipeline_input_lag_records``: records in the input topics after what the last
  batch read (the source's latest offsets less the batch's end offsets);
- ``riverbed_pipeline_state_rows``: rows in the query's state stores (``numRowsTotal`` of
  every stateful operator);
- ``riverbed_pipeline_last_batch_id``.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["BATCH_BUCKETS", "PipelineMetrics", "input_lag", "watermark_seconds"]

BATCH_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
"""Micro-batch durations (seconds): a few hundred milliseconds for a small batch on two
cores, minutes for a first batch over a large backlog."""


class PipelineMetrics:
    """One pipeline's metrics in a registry of their own; :meth:`observe` each progress."""

    def __init__(self, pipeline: str) -> None:
        self.registry = CollectorRegistry()
        labels, registry = ["pipeline"], self.registry
        self._batches = Counter(
            "riverbed_pipeline_batches", "Micro-batches run.", labels, registry=registry
        ).labels(pipeline)
        self._rows = Counter(
            "riverbed_pipeline_input_rows", "Input records read.", labels, registry=registry
        ).labels(pipeline)
        self._duration = Histogram(
            "riverbed_pipeline_batch_duration_seconds",
            "Duration of each micro-batch (Spark's triggerExecution).",
            labels,
            buckets=BATCH_BUCKETS,
            registry=registry,
        ).labels(pipeline)
        self._rate = Gauge(
            "riverbed_pipeline_rows_per_second",
            "Input records per second of the last micro-batch.",
            labels,
            registry=registry,
        ).labels(pipeline)
        self._watermark = Gauge(
            "riverbed_pipeline_watermark_seconds",
            "The event-time watermark (Unix seconds).",
            labels,
            registry=registry,
        )
        self._pipeline = pipeline
        self._lag = Gauge(
            "riverbed_pipeline_input_lag_records",
            "Records in the input topics after what the last micro-batch read.",
            labels,
            registry=registry,
        ).labels(pipeline)
        self._state_rows = Gauge(
            "riverbed_pipeline_state_rows",
            "Rows in the query's state stores.",
            labels,
            registry=registry,
        ).labels(pipeline)
        self._batch_id = Gauge(
            "riverbed_pipeline_last_batch_id",
            "The id of the last micro-batch run.",
            labels,
            registry=registry,
        ).labels(pipeline)

    def observe(self, progress: Mapping[str, Any]) -> None:
        """One micro-batch's progress (each batch once)."""
        self._batches.inc()
        self._rows.inc(int(progress.get("numInputRows") or 0))
        duration_ms = (progress.get("durationMs") or {}).get("triggerExecution")
        if duration_ms is not None:
            self._duration.observe(duration_ms / 1000)
        self._rate.set(float(progress.get("processedRowsPerSecond") or 0.0))
        watermark = watermark_seconds(progress)
        if watermark is not None:
            self._watermark.labels(self._pipeline).set(watermark)
        self._lag.set(input_lag(progress))
        self._state_rows.set(
            sum(int(op.get("numRowsTotal") or 0) for op in progress.get("stateOperators") or [])
        )
        batch_id = progress.get("batchId")
        if batch_id is not None:
            self._batch_id.set(int(batch_id))


def watermark_seconds(progress: Mapping[str, Any]) -> float | None:
    """The batch's watermark in Unix seconds; None when the query has none (yet)."""
    text = (progress.get("eventTime") or {}).get("watermark")
    if not text:
        return None
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.timestamp()


def input_lag(progress: Mapping[str, Any]) -> int:
    """Records in the inputs after the batch's end offsets: each source's latest offsets
    less its end offsets, summed over partitions."""
    lag = 0
    for source in progress.get("sources") or []:
        latest, end = _offsets(source.get("latestOffset")), _offsets(source.get("endOffset"))
        lag += sum(max(0, latest.get(tp, 0) - offset) for tp, offset in end.items())
    return lag


def _offsets(value: Any) -> dict[tuple[str, str], int]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, dict):
        return {}
    return {
        (topic, partition): int(offset)
        for topic, partitions in value.items()
        if isinstance(partitions, dict)
        for partition, offset in partitions.items()
    }
