"""The pipeline part of ``make demo``: the shop workload through ``page_views_per_minute``.

The shop workload (:mod:`riverbed.workloads.shop`) produces page views, searches, clicks and
payments, out of order and with some very late stragglers, while the
``page_views_per_minute`` pipeline runs (a one-second trigger). Window results are printed
as they arrive, one line per window: pages, views, and the late page views sent aside.
When the workload is done, one far-future page view moves the watermark past every window.
The demo then checks the results against a plain Python count of the page views produced:
every page view is either counted in its window or in ``late_events``, exactly once.
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
import time
from collections import Counter, defaultdict
from itertools import islice
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

import riverbed.spark
from riverbed.pipelines.catalog import PIPELINES
from riverbed.pipelines.runner import ensure_outputs
from riverbed.workloads.shop import ShopConfig, events

PIPELINE = "page_views_per_minute"
_QUIET = logging.getLogger("riverbed.demo.librdkafka")  # librdkafka's lines would interleave
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False
MINUTE_MS = 60_000


class _Tail(threading.Thread):
    """Reads the pipeline's outputs (read_committed) and prints each window as it arrives."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.windows: dict[tuple[int, str], int] = {}
        self.late: dict[str, dict[str, Any]] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "demo-pipeline-tail",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "logger": _QUIET,
            }
        )
        consumer.assign([TopicPartition(t, 0, 0) for t in PIPELINES[PIPELINE].outputs])
        pending: dict[int, list[int]] = defaultdict(list)  # window start -> views per page
        updated: dict[int, float] = {}
        try:
            while not self.stop.is_set():
                for message in consumer.consume(num_messages=1000, timeout=0.2):
                    if message.error() is not None or message.value() is None:
                        continue
                    value = json.loads(message.value())
                    if message.topic() == "late_events":
                        self.late[value["event_id"]] = value
                    else:
                        self.windows[(value["window_start"], value["page"])] = value["views"]
                        pending[value["window_start"]].append(value["views"])
                        updated[value["window_start"]] = time.monotonic()
                # A window's pages come from several write tasks: print it once it is quiet.
                quiet = [s for s, at in updated.items() if time.monotonic() - at > 0.5]
                self._print(pending, updated, quiet)
            self._print(pending, updated, list(updated))
        finally:
            consumer.close()

    def _print(
        self, pending: dict[int, list[int]], updated: dict[int, float], starts: list[int]
    ) -> None:
        for start in sorted(starts):
            views = pending.pop(start)
            del updated[start]
            stamp = time.strftime("%H:%M", time.gmtime(start / 1000))
            print(
                f"  window {stamp} UTC: {len(views)} pages, {sum(views):,} views "
                f"(late page views so far: {len(self.late)})",
                flush=True,
            )


def run(bootstrap: str, *, count: int) -> None:
    # Stragglers 3+ minutes behind the stream: beyond the 2-minute watermark even in a short run.
    config = ShopConfig(
        seed=7, users=3_000, event_rate=25.0, start_ms=1_767_225_600_000, late_by_ms=180_000
    )
    generated = list(islice(events(config), count))
    views = [e.value for e in generated if e.topic == "page_views"]
    print(
        f"shop workload: {len(generated):,} events ({len(views):,} page views) over "
        f"{(max(e.ts for e in generated) - min(e.ts for e in generated)) / MINUTE_MS:.0f} minutes "
        f"of event time, {sum(e.straggler for e in generated):,} of them very late stragglers"
    )
    ensure_outputs(PIPELINES[PIPELINE], bootstrap, 10.0)
    spark = riverbed.spark.session("riverbed-demo-pipeline", master="local[2]", log_level="ERROR")
    tail = _Tail(bootstrap)
    tail.start()
    try:
        source = (
            spark.readStream.format("riverbed")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", "page_views")
            .option("startingOffsets", "earliest")
            .load()
        )
        with tempfile.TemporaryDirectory() as checkpoint:
            query = (
                PIPELINES[PIPELINE]
                .build(source)
                .writeStream.format("riverbed")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("checkpointLocation", str(Path(checkpoint) / PIPELINE))
                .outputMode("append")
                .trigger(processingTime="1 second")
                .start()
            )
            print(f"{PIPELINE} running; window results as they arrive:")
            producer = Producer(
                {"bootstrap.servers": bootstrap, "enable.idempotence": True, "logger": _QUIET}
            )
            for i, event in enumerate(generated):
                producer.produce(event.topic, json.dumps(event.value), key=json.dumps(event.key))
                if i % 2_000 == 1_999:  # a stream, not a bulk load: windows close one by one
                    producer.flush()
                    query.processAllAvailable()
            far = {"event_id": "demo-far", "user_id": "demo", "page": "/far", "ts": 10**13}
            producer.produce("page_views", json.dumps(far), key=json.dumps({"user_id": "demo"}))
            producer.flush()
            expected = Counter((v["ts"] - v["ts"] % MINUTE_MS, v["page"]) for v in views)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                counted = sum(tail.windows.values()) + len(tail.late)
                if counted >= len(views):
                    break
                time.sleep(0.5)
            query.stop()
            del producer
    finally:
        tail.stop.set()
        tail.join(10)
        spark.stop()
    late = Counter((v["ts"] - v["ts"] % MINUTE_MS, v["page"]) for v in tail.late.values())
    total = Counter(tail.windows) + late
    print(
        f"{len(tail.windows):,} (window, page) results and {len(tail.late):,} late page views; "
        f"every page view counted once or sent to late_events: {total == expected}"
    )
