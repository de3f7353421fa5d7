"""WindowedCounts' state through PySpark's TwsTester: one value per key holding its open
windows and one timer, at the earliest window's end, that writes every window the
watermark has passed at once."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pyarrow as pa
from pyspark.sql.streaming.tws_tester import TwsTester

from riverbed.pipelines.operators.windowed_counts import WindowedCounts


def _events(*event_ids: str) -> bytes:
    table = pa.table({"event_id": list(event_ids)})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _feed(t: TwsTester, *panes: tuple[str, int, int]) -> list[tuple[str, Any, Any]]:
    """The pane rows (page, pane start, events) given to the operator, a call per page."""
    out = []
    for page in sorted({page for page, _, _ in panes}):
        rows = [
            {"page": page, "pane_start": start, "pane_events": count,
             "pane_rows": _events(*(f"{page}{start}-{i}" for i in range(count)))}
            for key, start, count in panes if key == page
        ]  # fmt: skip
        out += _out(t.testInPandas(page, pd.DataFrame(rows)))
    return out


def _out(frame: pd.DataFrame) -> list[tuple[str, Any, Any]]:
    rows = [] if frame.empty else frame.itertuples(index=False, name=None)
    parsed = [(topic, json.loads(key), json.loads(value)) for topic, key, value in rows]
    return sorted(parsed, key=lambda row: (row[0], json.dumps(row[1], sort_keys=True)))


def _tester() -> TwsTester:
    counts = WindowedCounts(
        key_fields=["page"], size_ms=10, slide_ms=10, topic="counts", count_field="views",
        late_topic="late", late_key_field="event_id", event_fields=["event_id"],
    )  # fmt: skip
    # Pipelines drop the watermarked column, so Spark drops no row: neither does this.
    return TwsTester(counts, timeMode="EventTime", eventTimeExtractor=lambda row: 1 << 62)


def _state(t: TwsTester, page: str) -> Any:
    stored = t.peekValueState("windows", page)
    return None if stored is None else json.loads(stored[0])


def test_one_timer_a_key_writes_every_window_the_watermark_passed() -> None:
    t = _tester()
    assert _feed(t, ("/", 0, 2), ("/", 10, 1), ("/a", 20, 4)) == []
    assert _feed(t, ("/", 0, 1), ("/", 20, 5)) == []
    assert _state(t, "/") == {"counts": {"0": 3, "10": 1, "20": 5}, "timers": [10]}
    assert _state(t, "/a") == {"counts": {"20": 4}, "timers": [30]}
    written = _out(t.setWatermark(25))
    assert written == [
        ("counts", {"window_start": 0, "page": "/"},
         {"window_start": 0, "window_end": 10, "page": "/", "views": 3}),
        ("counts", {"window_start": 10, "page": "/"},
         {"window_start": 10, "window_end": 20, "page": "/", "views": 1}),
    ]  # fmt: skip
    assert _state(t, "/") == {"counts": {"20": 5}, "timers": [30]}
    # A pane of a window already written goes to the side output, each event with the reason.
    late = _feed(t, ("/", 10, 2), ("/", 30, 1))
    assert [(topic, key) for topic, key, _ in late] == [
        ("late", {"event_id": "/10-0"}), ("late", {"event_id": "/10-1"}),
    ]  # fmt: skip
    assert "window [10, 20) was already complete" in late[0][2]["reason"]
    assert _state(t, "/") == {"counts": {"20": 5, "30": 1}, "timers": [30]}
    written = _out(t.setWatermark(1_000))
    assert sorted((k["page"], v["window_start"], v["views"]) for _, k, v in written) == [
        ("/", 20, 5), ("/", 30, 1), ("/a", 20, 4),
    ]  # fmt: skip
    assert _state(t, "/") is None and _state(t, "/a") is None


def test_an_earlier_window_gets_its_own_timer() -> None:
    t = _tester()
    _feed(t, ("/", 50, 1))
    _feed(t, ("/", 20, 1))  # earlier than the open window, not late
    assert _state(t, "/") == {"counts": {"20": 1, "50": 1}, "timers": [30, 60]}
    assert [v["window_start"] for _, _, v in _out(t.setWatermark(35))] == [20]
    assert _state(t, "/") == {"counts": {"50": 1}, "timers": [60]}
    assert [v["window_start"] for _, _, v in _out(t.setWatermark(60))] == [50]


def test_windows_of_an_older_checkpoint_move_to_the_value() -> None:
    # Before 2026-11-28 a key's windows were the map state "counts", with a timer each.
    t = _tester()
    _old_windows(t, "/", {0: 3, 10: 1})
    assert _feed(t, ("/", 20, 2)) == []
    assert _state(t, "/") == {"counts": {"0": 3, "10": 1, "20": 2}, "timers": [10, 20]}
    assert t.peekMapState("counts", "/") == {}
    _old_windows(t, "/a", {40: 7})  # moved by its timer, with no input
    written = _out(t.setWatermark(55))
    assert sorted((k["page"], v["window_start"], v["views"]) for _, k, v in written) == [
        ("/", 0, 3), ("/", 10, 1), ("/", 20, 2), ("/a", 40, 7),
    ]  # fmt: skip
    assert _state(t, "/") is None and _state(t, "/a") is None


def _old_windows(t: TwsTester, page: str, counts: dict[int, int]) -> None:
    """The key's windows as a checkpoint written before 2026-11-28 holds them: the map
    state, and a timer at each window's end."""
    t.updateMapState("counts", page, {(start,): (count,) for start, count in counts.items()})
    t.handle.setGroupingKey(page)
    for start in counts:
        t.handle.registerTimer(start + 10)
