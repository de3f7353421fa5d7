"""page_views_per_minute and late_events in a real Spark session against a real broker,
checked against a plain-Python reference: disorder within the watermark delay loses
nothing, very late page views go to late_events (each once, with the reason), a kill -9 and
restart change nothing, and a far-future event closes every window."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Producer

from tests.conftest import BrokerProcess
from tests.pipelines.support import (
    BASE,
    MINUTE,
    PipelineProcess,
    changelog,
    disordered,
    minute_counts,
    page_views,
    produce,
    read_committed,
)


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
    produce(bootstrap, "page_views", disordered(first, seed=1, max_ms=30_000))
    # Records that are not page views are left out (and break nothing).
    junk = Producer({"bootstrap.servers": bootstrap})
    for value in (b"not json", b'{"page": "/home"}', b'{"event_id": "x", "page": "/a"}', b"{}"):
        junk.produce("page_views", value, key=b'{"user_id": "u0"}')
    assert junk.flush(10) == 0
    pipeline = PipelineProcess.start(tmp_path, "page_views_per_minute", bootstrap, checkpoint)
    done = pipeline.wait_caught_up()
    produce(bootstrap, "page_views", stragglers)
    done = pipeline.wait_caught_up(done)
    pipeline.kill()
    produce(bootstrap, "page_views", disordered(later, seed=2, max_ms=30_000))  # while down
    pipeline = PipelineProcess.start(tmp_path, "page_views_per_minute", bootstrap, checkpoint)
    pipeline.wait_caught_up()
    far = {"event_id": "far", "user_id": "u0", "page": "/home", "ts": BASE + 24 * 60 * MINUTE}
    produce(bootstrap, "page_views", [far])
    expected = minute_counts(first + later)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        results = read_committed(bootstrap, "page_views_per_minute")
        if len(changelog(results)) >= len(expected):
            break
        time.sleep(1)
    assert pipeline.stop() == 0, pipeline.log()
    assert "page_views_per_minute stopped" in pipeline.log()

    results = read_committed(bootstrap, "page_views_per_minute")
    assert changelog(results) == expected
    assert len(results) == len(expected)  # each window once: no duplicates across the kill
    late = read_committed(bootstrap, "late_events")
    assert sorted(r.value["event_id"] for r in late) == sorted(e["event_id"] for e in stragglers)
    by_id = {e["event_id"]: e for e in stragglers}
    for record in late:
        event = dict(record.value)
        reason = event.pop("reason")
        assert event == by_id[event["event_id"]]
        assert record.key == {"event_id": event["event_id"]}
        start = event["ts"] - event["ts"] % MINUTE
        assert f"window [{start}, {start + MINUTE}) was already complete" in reason
