"""The demo's pipeline section: the shop workload through ``page_views_per_minute`` and
``fraud_alerts``.

The shop workload (:mod:`riverbed.workloads.shop`) produces page views, searches, clicks and
payments, out of order and with some very late stragglers, in rounds of
:data:`ROUND_EVENTS` events while the ``page_views_per_minute`` and ``fraud_alerts``
pipelines run (a :data:`TRIGGER` trigger). Window
results are printed as they arrive, one line per window: pages, views, and the late page
views sent aside; fraud alerts are printed as they fire, with the micro-batch that reads
the approved payment, and again if a payment read later (out of order) changes or withdraws
one. When the
workload is done, one far-future page view and one far-future payment move the watermarks
past everything. The demo then checks the results against plain Python over the events
produced: every page view is either counted in its window or in ``late_events``, exactly
once; the alerts are exactly those of DESIGN.md's rule over the payments that were not too
late to be put in order (those went to ``fraud_alerts_late``).
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections import Counter, defaultdict
from itertools import islice
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from riverbed.demo.console import kafka_config, tail_consumer
from riverbed.pipelines.runner import ensure_outputs, stop_between_batches
from riverbed.pipelines.shop import PIPELINES
from riverbed.testing import references
from riverbed.workloads.shop import ShopConfig, events

PIPELINE = "page_views_per_minute"
FRAUD = "fraud_alerts"
MINUTE_MS = 60_000
ROUND_EVENTS = 5_000
"""Events produced before both queries are let catch up: a stream rather than a bulk load,
so that windows close a few at a time (5,000 shop events are about 3 minutes of event time).
A round costs a micro-batch and the no-data batch that moves the watermark, 1-2 s each on 2
cores whatever the round's size; rounds of 2,000 events made the section 67 s long, of
5,000 about 30 s (30,000 events, measured)."""
TRIGGER = "200 milliseconds"
"""The queries' trigger. Each round waits for the next trigger before its batch: at
``riverbed pipeline run``'s 1 s, 0.5 s on average and about 1 s more per round (measured)."""


class _Tail(threading.Thread):
    """Reads the pipeline's outputs (read_committed) and prints each window as it arrives."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.windows: dict[tuple[int, str], int] = {}
        self.late: dict[str, dict[str, Any]] = {}
        self.alerts: dict[str, dict[str, Any]] = {}
        self.late_payments: set[str] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        outputs = [*PIPELINES[PIPELINE].outputs, *PIPELINES[FRAUD].outputs]
        consumer = tail_consumer(self.bootstrap, outputs, group="demo-pipeline-tail")
        pending: dict[int, list[int]] = defaultdict(list)  # window start -> views per page
        updated: dict[int, float] = {}
        try:
            while not self.stop.is_set():
                for message in consumer.consume(num_messages=1000, timeout=0.2):
                    raw = message.value()
                    if message.error() is not None:
                        continue
                    if message.topic() == FRAUD:  # a changelog: a tombstone withdraws
                        alert = None if raw is None else json.loads(raw)
                        self._alert(json.loads(message.key() or b"{}"), alert)
                        continue
                    if raw is None:
                        continue
                    value = json.loads(raw)
                    if message.topic() == "fraud_alerts_late":
                        self.late_payments.add(value["payment_id"])
                    elif message.topic() == "late_events":
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

    def _alert(self, key: dict[str, Any], alert: dict[str, Any] | None) -> None:
        payment = key["payment_id"]
        if alert is None:
            self.alerts.pop(payment, None)
            print(
                f"  fraud alert withdrawn: card {key['card_id']}, payment {payment} (an "
                "approval read later came between it and its declines)",
                flush=True,
            )
            return
        again = " (corrected)" if payment in self.alerts else ""
        self.alerts[payment] = alert
        approved = time.strftime("%H:%M:%S", time.gmtime(alert["approved_ts"] / 1000))
        first = time.strftime("%H:%M:%S", time.gmtime(alert["first_declined_ts"] / 1000))
        print(
            f"  FRAUD ALERT{again} card {alert['card_id']}: payment {payment} approved at "
            f"{approved} after {alert['declined_count']} declines since {first}",
            flush=True,
        )

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


def run(spark: SparkSession, bootstrap: str, *, count: int) -> None:
    """Stream ``count`` shop events through both pipelines, printing results as they
    arrive, then check them (module docstring)."""
    # Stragglers 3+ minutes behind the stream: beyond the 2-minute watermark even in a short run.
    config = ShopConfig(
        seed=7, users=3_000, event_rate=25.0, start_ms=1_767_225_600_000, late_by_ms=180_000
    )
    generated = list(islice(events(config), count))
    views = [e for e in generated if e.topic == "page_views"]
    print(
        f"shop workload: {len(generated):,} events ({len(views):,} page views) over "
        f"{(max(e.ts for e in generated) - min(e.ts for e in generated)) / MINUTE_MS:.0f} minutes "
        f"of event time, {sum(e.straggler for e in generated):,} of them very late stragglers"
    )
    payments = [e.value for e in generated if e.topic == "payments"]
    for name in (PIPELINE, FRAUD):
        ensure_outputs(PIPELINES[name], bootstrap, 10.0)
    tail = _Tail(bootstrap)
    tail.start()
    try:
        with tempfile.TemporaryDirectory() as checkpoints:
            queries = [
                start(spark, bootstrap, name, Path(checkpoints), trigger=TRIGGER)
                for name in (PIPELINE, FRAUD)
            ]
            print(f"{PIPELINE} and {FRAUD} running; results as they arrive:")
            producer = Producer(kafka_config(bootstrap, {"enable.idempotence": True}))
            for i, event in enumerate(generated):
                producer.produce(event.topic, json.dumps(event.value), key=json.dumps(event.key))
                if i % ROUND_EVENTS == ROUND_EVENTS - 1:
                    producer.flush()
                    for query in queries:
                        query.processAllAvailable()
            far = {"event_id": "demo-far", "user_id": "demo", "page": "/far", "ts": 10**13}
            producer.produce("page_views", json.dumps(far), key=json.dumps({"user_id": "demo"}))
            far_payment = {"payment_id": "demo-far", "card_id": "demo-far", "user_id": "demo",
                           "amount_cents": 1, "status": "declined", "ts": 10**13}  # fmt: skip
            producer.produce(
                "payments", json.dumps(far_payment), key=json.dumps({"card_id": "demo-far"})
            )
            producer.flush()
            expected = Counter((e.ts - e.ts % MINUTE_MS, e.value["page"]) for e in views)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                counted = sum(tail.windows.values()) + len(tail.late)
                in_time = [p for p in payments if p["payment_id"] not in tail.late_payments]
                if counted >= len(views) and tail.alerts == fraud_reference(in_time):
                    break
                time.sleep(0.1)
            for query in queries:
                stop_between_batches(query)
            del producer
    finally:
        tail.stop.set()
        tail.join(10)
    late = Counter((v["ts"] - v["ts"] % MINUTE_MS, v["page"]) for v in tail.late.values())
    total = Counter(tail.windows) + late
    print(
        f"{len(tail.windows):,} (window, page) results and {len(tail.late):,} late page views; "
        f"every page view counted once or sent to late_events: {total == expected}"
    )
    in_time = [p for p in payments if p["payment_id"] not in tail.late_payments]
    print(
        f"{len(tail.alerts)} fraud alerts over {len(payments):,} payments "
        f"({len(tail.late_payments)} too late for event-time order, in fraud_alerts_late); "
        f"the alerts are exactly DESIGN.md's rule over the others: "
        f"{tail.alerts == fraud_reference(in_time)}"
    )


def start(
    spark: SparkSession,
    bootstrap: str,
    name: str,
    checkpoints: Path,
    *,
    starting_offsets: str = "earliest",
    trigger: str = "1 second",
) -> StreamingQuery:
    """Pipeline ``name`` as ``riverbed pipeline run`` runs it (by default with its 1 s
    trigger), with its checkpoint in ``checkpoints / name``."""
    pipeline = PIPELINES[name]
    source = (
        spark.readStream.format("riverbed")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", ",".join(pipeline.inputs))
        .option("startingOffsets", starting_offsets)
        .load()
    )
    return (
        pipeline.build(source)
        .writeStream.format("riverbed")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("checkpointLocation", str(checkpoints / name))
        .outputMode("append")
        .trigger(processingTime=trigger)
        .queryName(name)
        .start()
    )


def fraud_reference(payments: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """DESIGN.md's fraud rule over ``payments`` (:func:`riverbed.testing.references.fraud_alerts`),
    the alerts by payment_id."""
    return {alert["payment_id"]: alert for alert in references.fraud_alerts(payments)}
