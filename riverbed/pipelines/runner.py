"""Running one pipeline: ``riverbed pipeline run NAME`` (:func:`run`), any
:class:`~riverbed.pipelines.pipeline.Pipeline` of a catalog given by name (the shop's:
:data:`riverbed.pipelines.shop.PIPELINES`).

The query reads the pipeline's input topics through the riverbed data source (from the
earliest offsets on its first run) and writes its rows through the riverbed sink, exactly
once: each write task's rows go in one Kafka transaction with the batch's progress, so a
read_committed reader never sees a duplicate or a result of a batch that was rolled back.
Spark's checkpoint (offsets, state store, the query id the sink's transactions are named
after) is what makes a restart continue exactly where the last run stopped, after a clean
stop or a kill -9 alike.

The output topics are created if missing, compacted: each is a changelog whose last value
per key is the result.

Asked to stop, :func:`run` stops the query between two micro-batches if one ends within
:data:`STOP_WAIT_S` (:func:`stop_between_batches`); otherwise the batch in flight is rolled
back, and the next run does it again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    NewTopic,
)
from pyspark.sql.streaming.query import StreamingQuery

import riverbed.spark
from riverbed.pipelines.metrics import input_lag
from riverbed.pipelines.pipeline import Pipeline

__all__ = [
    "STOP_WAIT_S",
    "PipelineError",
    "RunConfig",
    "ensure_outputs",
    "new_progress",
    "progress_line",
    "run",
    "stop_between_batches",
]

_LIBRDKAFKA = logging.getLogger("riverbed.pipelines.librdkafka")
"""librdkafka's log of the admin client that creates the outputs: Python shows its warnings
and errors and, unless logging is configured otherwise, drops the rest."""

STOP_WAIT_S = 10.0
"""How long a stop waits for the micro-batch in flight to end. A stateful batch of the shop's
pipelines takes 1-3 s on 2 cores with ``local[2]``; a first run's batch over a large backlog
may take longer, and is then rolled back."""


class PipelineError(Exception):
    """The pipeline cannot run (the message says why)."""


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    name: str
    bootstrap: str
    checkpoint: Path
    trigger_ms: int = 1000
    max_offsets_per_trigger: int | None = None
    """The source's ``maxOffsetsPerTrigger``; None: Spark's default, a batch reads all
    there is."""
    master: str | None = None
    progress_every_s: float = 10.0
    connect_timeout_s: float = 10.0


def ensure_outputs(pipeline: Pipeline, bootstrap: str, timeout_s: float) -> None:
    """Create the pipeline's missing output topics (compacted, one partition)."""
    settings: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": _LIBRDKAFKA}
    admin = AdminClient(settings)
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as e:
        raise PipelineError(
            f"no broker reachable at {bootstrap} within {timeout_s:g} s: {e.args[0].str()}"
        ) from None
    missing = [t for t in pipeline.outputs if t not in metadata.topics]
    if not missing:
        return
    futures = admin.create_topics(
        [NewTopic(t, num_partitions=1, config={"cleanup.policy": "compact"}) for t in missing]
    )
    for topic, future in futures.items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as e:
            if "already exists" not in e.args[0].str().lower():
                raise PipelineError(f"cannot create topic {topic}: {e.args[0].str()}") from None


def progress_line(progress: dict[str, Any]) -> str:
    """One line from a query's progress: batch, rows/s, watermark and input lag."""
    watermark = progress.get("eventTime", {}).get("watermark", "-")
    rate = progress.get("processedRowsPerSecond") or 0.0
    return (
        f"batch {progress.get('batchId')}: {progress.get('numInputRows', 0)} rows, "
        f"{rate:.0f} rows/s, watermark {watermark}, input lag {input_lag(progress)} records"
    )


def new_progress(query: StreamingQuery, after: int | None) -> list[dict[str, Any]]:
    """The progress reports of the micro-batches after batch ``after`` (None: all kept),
    oldest first."""
    return [
        p
        for p in query.recentProgress
        if p.get("batchId") is not None and (after is None or p["batchId"] > after)
    ]


def stop_between_batches(query: StreamingQuery, *, timeout_s: float = STOP_WAIT_S) -> None:
    """Stop ``query`` once no micro-batch is running, or after ``timeout_s`` in any case.

    Spark has no graceful stop for Structured Streaming: ``stop()`` cancels the batch in
    flight, which is correct (the batch is rolled back and done again on restart) but makes
    Spark log its cancelled tasks as errors with stack traces ("ERROR Utils: Aborting task",
    ``TaskKilledException``, "Data source write support ... is aborting"). Between batches
    (``isTriggerActive`` false: the query waits for its next trigger) it stops quietly."""
    deadline = time.monotonic() + timeout_s
    while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.01)
    query.stop()


def run(
    config: RunConfig,
    *,
    pipelines: Mapping[str, Pipeline],
    say: Callable[[str], None],
    stopping: Callable[[], bool],
    on_progress: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Run the pipeline ``config.name`` of ``pipelines`` until ``stopping()`` (module
    docstring); ``on_progress`` is given each micro-batch's progress report, once, in
    order (:class:`~riverbed.pipelines.metrics.PipelineMetrics.observe`)."""
    pipeline = pipelines.get(config.name)
    if pipeline is None:
        raise PipelineError(
            f"no pipeline {config.name!r}; the pipelines are: {', '.join(sorted(pipelines))}"
        )
    if config.trigger_ms <= 0:
        raise PipelineError("--trigger-ms must be positive")
    ensure_outputs(pipeline, config.bootstrap, config.connect_timeout_s)
    config.checkpoint.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        spark = riverbed.spark.session(
            f"riverbed-{pipeline.name}", master=config.master, log_level="ERROR"
        )
    except riverbed.spark.WorkerSetupError as e:  # one line: what to set
        raise PipelineError(str(e)) from None
    try:
        reader = (
            spark.readStream.format("riverbed")
            .option("kafka.bootstrap.servers", config.bootstrap)
            .option("subscribe", ",".join(pipeline.inputs))
            .option("startingOffsets", "earliest")
        )
        if config.max_offsets_per_trigger is not None:
            reader = reader.option("maxOffsetsPerTrigger", str(config.max_offsets_per_trigger))
        source = reader.load()
        query = (
            pipeline.build(source)
            .writeStream.format("riverbed")
            .option("kafka.bootstrap.servers", config.bootstrap)
            .option("checkpointLocation", str(config.checkpoint))
            .outputMode("append")
            .trigger(processingTime=f"{config.trigger_ms} milliseconds")
            .queryName(pipeline.name)
            .start()
        )
        say(
            f"{pipeline.name} running (Spark {spark.version}, started in "
            f"{time.monotonic() - started:.1f} s; checkpoint {config.checkpoint})"
        )
        last_batch, last_seen, last_line = None, None, time.monotonic()
        while query.isActive and not stopping():
            time.sleep(0.2)
            reports = new_progress(query, last_seen)
            if not reports:
                continue
            last_seen = reports[-1]["batchId"]
            if on_progress is not None:
                for report in reports:
                    on_progress(report)
            progress = reports[-1]
            due = time.monotonic() - last_line >= config.progress_every_s
            if progress.get("batchId") != last_batch and (due or progress.get("numInputRows")):
                say(progress_line(progress))
                last_batch, last_line = progress.get("batchId"), time.monotonic()
        if query.isActive:
            stop_between_batches(query)
            say(f"{pipeline.name} stopped")
        elif query.exception() is not None:
            raise PipelineError(f"{pipeline.name} failed: {query.exception()}")
    finally:
        spark.stop()
