"""page_views_per_minute and late_events in a real Spark session against a real broker,
checked against a plain-Python reference: disorder within the watermark delay loses
nothing, very late page views go to late_events (each once, with the reason), a kill -9 and
restart change nothing, and a far-future event closes every window."""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Producer

from riverbed.testing.references import page_views_per_minute
from tests.support.brokers import BrokerProcess
from tests.support.events import BASE, MINUTE, disordered, page_views
from tests.support.pipelines import PipelineProcess, late_reasons, stop_once_written
from tests.support.topics import changelog, keyed, produce_events


def test_windows_late_events_kill_and_restart(
    broker_process: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = broker_process.bootstrap
    first = page_views(1, users=40, start=BASE, hours=1, prefix="a")
    later = page_views(2, users=40, start=BASE + 60 * MINUTE, hours=0.5, prefix="c")
    # Very late: event times in the first 20 minutes, sent after the first hour was seen.
    stragglers = [
        {**e, "event_id": f"late{i}"}
        for i, e in enumerate(first[:: len(first) // 25])
        if e["ts"] < BASE + 20 * MINUTE
    ]
    checkpoint = tmp_path / "checkpoint"
    produce_events(bootstrap, "page_views", disordered(first, seed=1, max_ms=30_000))
    # Records that are not page views are left out (and break nothing).
    junk = Producer({"bootstrap.servers": bootstrap})
    for value in (b"not json", b'{"page": "/home"}', b'{"event_id": "x", "page": "/a"}', b"{}"):
        junk.produce("page_views", value, key=b'{"user_id": "u0"}')
    assert junk.flush(10) == 0
    pipeline = PipelineProcess.start(tmp_path, "page_views_per_minute", bootstrap, checkpoint)
    done = pipeline.wait_caught_up()
    produce_events(bootstrap, "page_views", stragglers)
    done = pipeline.wait_caught_up(done)
    pipeline.kill()
    produce_events(bootstrap, "page_views", disordered(later, seed=2, max_ms=30_000))  # while down
    pipeline = PipelineProcess.start(tmp_path, "page_views_per_minute", bootstrap, checkpoint)
    pipeline.wait_caught_up()
    far = {"event_id": "far", "user_id": "u0", "page": "/home", "ts": BASE + 24 * 60 * MINUTE}
    produce_events(bootstrap, "page_views", [far])
    expected = keyed(page_views_per_minute(first + later), "window_start", "page")
    results = stop_once_written(
        pipeline, bootstrap, "page_views_per_minute", keys=len(expected), timeout_s=120
    )
    assert changelog(results) == expected
    assert len(results) == len(expected)  # each window once: no duplicates across the kill
    for event, reason in late_reasons(bootstrap, "late_events", stragglers, "event_id"):
        start = event["ts"] - event["ts"] % MINUTE
        assert f"window [{start}, {start + MINUTE}) was already complete" in reason
