"""What the benchmarks share (not a benchmark): the machine line every one prints, the broker
as a child process, the producer they fill topics with, CPU seconds, percentiles, and the
pipeline benchmarks' streaming query, watermark and tail of their outputs. The benchmarks
import it as ``_common`` (``python benchmarks/NAME.py`` puts benchmarks/ on the path);
reading topics back and the pipelines' references are riverbed.testing's.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import os
import platform
import pstats
import re
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from riverbed.pipelines.pipeline import Pipeline
    from riverbed.testing.memory_states import OperatorRun

PARTITIONS = 4
MESSAGE_BYTES = 100
PRODUCER_SETTINGS = {
    "linger.ms": 5,
    "batch.size": 1_000_000,  # librdkafka's largest batch, the "1 MB batch" of the target
    "batch.num.messages": 1_000_000,  # let batch.size, not the count, end a batch
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 2_000_000,
}


def machine() -> str:
    """The machine line every benchmark prints: CPU, cores, memory, OS, Python."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = psutil.virtual_memory().total / 1024**3
    return (
        f"{cpu}, {os.cpu_count()} cores, {memory_gib:.0f} GiB, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}"
    )


def cpu_speed_ms() -> tuple[float, float]:
    """:func:`python_speed_ms` in one process, then in one process per core at once (the
    slowest of them): this machine's speed at the moment, alone and with every core busy.
    The benchmarks' machine is a VM whose speed drifts by a third within minutes, so a
    figure is read beside these (BENCHMARKS.md)."""
    from concurrent.futures import ProcessPoolExecutor

    alone = python_speed_ms()
    cores = os.cpu_count() or 1
    with ProcessPoolExecutor(cores) as pool:
        together = max(pool.map(python_speed_ms, [5] * cores))
    return alone, together


def python_speed_ms(repeat: int = 5) -> float:
    """A fixed piece of pure Python (JSON, dicts, small objects: what riverbed's hot paths
    do), its best time of ``repeat`` in milliseconds."""
    import json

    documents = [{"id": f"k{n}", "n": n, "data": {"a": n % 7, "b": [n, n]}} for n in range(2_000)]
    best = math.inf
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(10):
            folded: dict[str, int] = {}
            for document in documents:
                read = json.loads(json.dumps(document))
                folded[read["id"]] = folded.get(read["id"], 0) + read["data"]["a"]
        best = min(best, time.perf_counter() - started)
    return best * 1000


def start_broker(
    data_dir: Path, *, extra_args: Sequence[str] = ()
) -> tuple[subprocess.Popen[bytes], str]:
    """``riverbed broker`` on a free port (log level WARNING); the process and its
    bootstrap address, once it listens."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "riverbed.cli.main",
            "broker",
            "--data-dir",
            str(data_dir),
            "--listen",
            "127.0.0.1:0",
            "--log-level",
            "WARNING",
            *extra_args,
        ],
        stdout=subprocess.PIPE,
    )
    assert process.stdout is not None
    line = process.stdout.readline().decode()
    match = re.search(r"listening on (\S+)", line)
    if not match:
        process.kill()
        raise SystemExit(f"broker did not start: {line!r}")
    return process, match.group(1)


def produce(bootstrap: str, topic: str, count: int, *, acks: str) -> float:
    """Seconds to produce ``count`` messages of MESSAGE_BYTES round-robin over PARTITIONS
    partitions with PRODUCER_SETTINGS and have every one acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, **PRODUCER_SETTINGS})
    payload = b"x" * MESSAGE_BYTES
    failures = 0

    def on_delivery(err: KafkaError | None, _message: object) -> None:
        nonlocal failures
        if err is not None:
            failures += 1

    producer.list_topics(topic, timeout=10)  # connect and learn leaders before the clock starts
    start = time.perf_counter()
    produce_one = producer.produce
    for i in range(count):
        produce_one(topic, payload, partition=i % PARTITIONS, on_delivery=on_delivery)
        if i % 100_000 == 0:
            producer.poll(0)
    if producer.flush(300) != 0 or failures:
        raise SystemExit(f"{failures} deliveries failed")
    return time.perf_counter() - start


class PeakRss:
    """Samples a process's resident memory every 50 ms."""

    def __init__(self, pid: int) -> None:
        self._process = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self._process.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.05)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def cpu_seconds_of(process: psutil.Process) -> float:
    """CPU seconds (user + system) ``process`` used so far."""
    times = process.cpu_times()
    return float(times.user + times.system)


class CpuClock:
    """CPU seconds (user + system) a process used since the last call."""

    def __init__(self, pid: int) -> None:
        self._process = psutil.Process(pid)
        self._last = cpu_seconds_of(self._process)

    def lap(self) -> float:
        now = cpu_seconds_of(self._process)
        used, self._last = now - self._last, now
        return used


def cpu_snapshot() -> dict[int, tuple[str, float]]:
    """CPU seconds (user + system) so far of Spark's JVM, its Python workers, the broker and
    this process (the driver's Python side): per process id, its kind and its seconds."""
    snapshot: dict[int, tuple[str, float]] = {}
    me = psutil.Process()
    for process in [me, *me.children(recursive=True)]:
        try:
            command = " ".join(process.cmdline())
            used = cpu_seconds_of(process)
        except psutil.Error:
            continue
        if process.pid == me.pid:
            kind = "driver"
        elif "java" in process.name():
            kind = "JVM"
        elif "pyspark" in command:
            kind = "Python workers"
        elif "broker" in command:
            kind = "broker"
        else:
            kind = "other"
        snapshot[process.pid] = (kind, used)
    return snapshot


def cpu_seconds_since(before: dict[int, tuple[str, float]]) -> Counter[str]:
    """CPU seconds by kind used since :func:`cpu_snapshot` gave ``before``: per process, so
    that a Python worker that ended meanwhile does not subtract its earlier seconds (it made
    the totals negative). Processes that ended are missing: Spark's short-lived workers
    (planning, the sink's commit) use little."""
    totals: Counter[str] = Counter()
    for pid, (kind, used) in cpu_snapshot().items():
        totals[kind] += used - before.get(pid, (kind, 0.0))[1]
    return totals


def print_totals(batches: Sequence[dict[str, Any]], cpu_s: Counter[str], seconds: float) -> None:
    """A run's ``durationMs`` summed over its batches' progress reports, and its CPU seconds
    (:func:`cpu_seconds_since`) against the ``seconds`` it took on 2 cores."""
    total: Counter[str] = Counter()
    for batch in batches:
        total.update(batch.get("durationMs", {}))
    parts = ", ".join(f"{k} {v / 1000:.1f} s" for k, v in total.most_common())
    print(f"  durationMs summed over batches: {parts}", flush=True)
    cpu = ", ".join(f"{k} {v:.1f}" for k, v in cpu_s.most_common() if v >= 0.05)
    print(
        f"  CPU seconds ({2 * seconds:.1f} available on 2 cores): {cpu}; "
        f"{sum(cpu_s.values()) / seconds:.2f} cores busy on average",
        flush=True,
    )


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile: the smallest value with at least ``fraction`` of the
    values at or below it."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


def watermark_ms(progress: dict[str, Any]) -> int:
    """The event-time watermark of a streaming progress report, in epoch ms."""
    text = progress.get("eventTime", {}).get("watermark", "1970-01-01T00:00:00.000Z")
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def pipeline_query(
    spark: SparkSession,
    pipeline: Pipeline,
    bootstrap: str,
    checkpoint: Path,
    *,
    max_offsets: int | None = None,
    trigger_ms: int | None = None,
) -> StreamingQuery:
    """The pipeline as ``riverbed pipeline run`` builds it (one riverbed source subscribed to
    its inputs from the earliest offsets, the riverbed sink with ``checkpoint``, append
    mode), started with the benchmark's trigger: AvailableNow unless ``trigger_ms``."""
    reader = (
        spark.readStream.format("riverbed")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", ",".join(pipeline.inputs))
        .option("startingOffsets", "earliest")
    )
    if max_offsets is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    writer = (
        pipeline.build(reader.load())
        .writeStream.format("riverbed")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("checkpointLocation", str(checkpoint))
        .outputMode("append")
        .queryName(pipeline.name)
    )
    if trigger_ms is None:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{trigger_ms} milliseconds")
    return writer.start()


@dataclass(frozen=True)
class TimedQuery:
    seconds: float
    batches: list[dict[str, Any]]
    """The query's progress reports, as JSON."""
    cpu_s: Counter[str]
    """CPU seconds used while it ran, by kind (:func:`cpu_seconds_since`)."""


def run_to_end(
    spark: SparkSession, pipeline: Pipeline, bootstrap: str, checkpoint: Path, max_offsets: int
) -> TimedQuery:
    """The pipeline as :func:`pipeline_query` starts it (AvailableNow), timed from its start
    to its end, with the CPU seconds used meanwhile; SystemExit if the query failed."""
    cpu_before = cpu_snapshot()
    started = time.perf_counter()
    query = pipeline_query(spark, pipeline, bootstrap, checkpoint, max_offsets=max_offsets)
    query.awaitTermination()
    seconds = time.perf_counter() - started
    cpu_s = cpu_seconds_since(cpu_before)
    if query.exception() is not None:
        raise SystemExit(f"{pipeline.name} failed: {query.exception()}")
    return TimedQuery(seconds, [json.loads(p.json) for p in query.recentProgress], cpu_s)


class ResultTail:
    """Receives partition 0 of each of ``topics`` from its start, read_committed, in a
    thread, as the latency benchmarks watch a pipeline's outputs (fetch waits of 10 ms, not
    librdkafka's 500): ``records``, (receive time ms, topic, value as JSON, None for a
    tombstone) per record. Consumer errors are skipped: librdkafka retries on its own."""

    def __init__(self, bootstrap: str, topics: Sequence[str]) -> None:
        self.records: list[tuple[int, str, Any]] = []
        self._stopping = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"tail-{uuid.uuid4().hex}",  # assign() only: no membership
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 10,
                "fetch.queue.backoff.ms": 10,
            }
        )
        self._consumer.assign([TopicPartition(topic, 0, 0) for topic in topics])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.is_set():
            message = self._consumer.poll(0.1)
            if message is None or message.error() is not None:
                continue
            received_ms = time.time_ns() // 1_000_000
            value = message.value()
            topic = message.topic()
            assert topic is not None  # a record
            self.records.append((received_ms, topic, None if value is None else json.loads(value)))

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        self._consumer.close()


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A plain text table on stdout: the first column left-aligned, the others right."""
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows, strict=True)]
    for row in [headers, ["-" * w for w in widths], *rows]:
        cells = [str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in
                 enumerate(zip(row, widths, strict=True))]  # fmt: skip
        print("  ".join(cells), flush=True)


def print_profile(call: Callable[[], object]) -> None:
    """Run ``call`` once under cProfile and print its top functions, by their own time
    and inclusive (the operator benchmarks' ``--profile``)."""
    profile = cProfile.Profile()
    profile.runcall(call)
    pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    pstats.Stats(profile).sort_stats("cumulative").print_stats(25)


def operator_arguments(doc: str, unit: str, *, cache: bool) -> argparse.Namespace:
    """The command line of an operator benchmark: ``--UNIT`` (how many input records, e.g.
    ``--payments``), ``--batch``, ``--repeat``, ``--profile`` and, with ``cache``, ``--cache``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument(f"--{unit}", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=100_000, help=f"{unit} per micro-batch")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="one run under cProfile")
    if cache:
        parser.add_argument("--cache", type=Path, help=f"keep the {unit} made in this file")
    return parser.parse_args()


def measure_operator(
    args: argparse.Namespace,
    new_run: Callable[[], OperatorRun],
    work: Sequence[tuple[int, dict[int, Any]]],
    count: int,
    unit: str,
    check: Callable[[OperatorRun], str],
) -> None:
    """An operator benchmark's measurement (``args`` from :func:`operator_arguments`): one
    run of ``work`` under cProfile with ``--profile``, else ``--repeat`` runs on fresh
    states from ``new_run``, each printed with its CPU µs per input ``unit`` (``count`` of
    them), the state's text at the end and ``check``'s verdict, then the spread."""
    if args.profile:
        run = new_run()
        print_profile(lambda: run(work))
        return
    figures = []
    for i in range(args.repeat):
        run = new_run()
        cpu = time.process_time()
        run(work)
        per_unit = (time.process_time() - cpu) / count * 1e6
        figures.append(per_unit)
        read, written = (chars / count for chars in run.state_traffic())
        print(f"run {i + 1}: {per_unit:.1f} CPU-µs a {unit}, state at the end "
              f"{run.state_bytes() / 2**20:.1f} MiB, state read / written {read:,.0f} / "
              f"{written:,.0f} bytes a {unit}, {check(run)}")  # fmt: skip
    print_spread(figures, f"CPU-µs a {unit}")


def print_spread(figures: Sequence[float], unit: str) -> None:
    """The median of several runs' figures, with the smallest and the largest."""
    print(f"median {statistics.median(figures):.1f} {unit} "
          f"(min {min(figures):.1f}, max {max(figures):.1f})")  # fmt: skip
