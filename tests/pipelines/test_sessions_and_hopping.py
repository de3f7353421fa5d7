"""user_sessions and page_views_sliding (hopping windows) in a real Spark session against a
real broker, checked against plain-Python references."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from riverbed.testing.references import user_sessions
from tests.support.brokers import BrokerProcess
from tests.support.events import BASE, MINUTE, disordered, page_views
from tests.support.pipelines import PipelineProcess
from tests.support.topics import changelog, keyed, produce_events, read_json


def _run_to_the_end(
    tmp_path: Path, name: str, bootstrap: str, events: list[dict[str, Any]], expected: int
) -> None:
    produce_events(bootstrap, "page_views", disordered(events, seed=3, max_ms=60_000))
    pipeline = PipelineProcess.start(tmp_path, name, bootstrap, tmp_path / name)
    pipeline.wait_caught_up()
    far = {"event_id": "far", "user_id": "far", "page": "/far", "ts": BASE + 48 * 60 * MINUTE}
    produce_events(bootstrap, "page_views", [far])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(read_json(bootstrap, name)) < expected:
        time.sleep(1)
    assert pipeline.stop() == 0, pipeline.log()


def test_user_sessions(broker_process: BrokerProcess, tmp_path: Path) -> None:
    events = page_views(5, users=30, start=BASE, hours=4, prefix="s")
    expected = keyed(user_sessions(events), "user_id", "session_start")
    gaps = Counter(v["page_views"] > 1 for v in expected.values())
    assert gaps[True] > 10 and len(expected) > 60  # many multi-view sessions, many per user
    _run_to_the_end(tmp_path, "user_sessions", broker_process.bootstrap, events, len(expected))
    results = read_json(broker_process.bootstrap, "user_sessions")
    assert changelog(results) == expected
    assert len(results) == len(expected)


def hopping_counts(events: list[dict[str, Any]], size: int, slide: int) -> dict[str, Any]:
    counts: Counter[tuple[int, str]] = Counter()
    for e in events:
        start = e["ts"] - e["ts"] % slide
        while start > e["ts"] - size:
            counts[(start, e["page"])] += 1
            start -= slide
    rows = [
        {"window_start": s, "window_end": s + size, "page": p, "views": n}
        for (s, p), n in counts.items()
    ]
    return keyed(rows, "window_start", "page")


def test_page_views_sliding(broker_process: BrokerProcess, tmp_path: Path) -> None:
    events = page_views(6, users=20, start=BASE, hours=1, prefix="h")
    expected = hopping_counts(events, 5 * MINUTE, MINUTE)
    _run_to_the_end(tmp_path, "page_views_sliding", broker_process.bootstrap, events, len(expected))
    results = read_json(broker_process.bootstrap, "page_views_sliding")
    assert changelog(results) == expected
    assert len(results) == len(expected)
    assert read_json(broker_process.bootstrap, "page_views_sliding_late") == []
