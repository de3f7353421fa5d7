"""WindowedCounts' state through PySpark's TwsTester: one value per key holding its open
windows and one timer, at the earliest window's end, that writes every window the
watermark has passed at once; and the windows a micro-batch's input passes, written with
that input, one micro-batch earlier, with the same results."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.streaming.tws_tester import TwsTester

from riverbed.pipelines.operators.windowed_counts import WindowedCounts


def _events(*event_ids: str) -> bytes:
    table = pa.table({"event_id": list(event_ids)})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _feed(
    t: TwsTester, *panes: tuple[str, int, int], batch_max_ts: int = 0
) -> list[tuple[str, Any, Any]]:
    """The pane rows (page, pane start, events) given to the operator, a call per page."""
    out = []
    for page in sorted({page for page, _, _ in panes}):
        rows = [
            {"page": page, "pane_start": start, "pane_events": count,
             "pane_rows": _events(*(f"{page}{start}-{i}" for i in range(count))),
             "batch_max_ts": batch_max_ts}
            for key, start, count in panes if key == page
        ]  # fmt: skip
        out += _out(t.testInPandas(page, pd.DataFrame(rows)))
    return out


def _out(frame: pd.DataFrame | list[Any]) -> list[tuple[str, Any, Any]]:
    # (TwsTester.setWatermark gives [] rather than a frame when no timer fires)
    rows = [] if len(frame) == 0 else frame.itertuples(index=False, name=None)
    parsed = [(topic, json.loads(key), json.loads(value)) for topic, key, value in rows]
    return sorted(parsed, key=lambda row: (row[0], json.dumps(row[1], sort_keys=True)))


def _tester(delay_ms: int | None = None, size_ms: int = 10, slide_ms: int = 10) -> TwsTester:
    counts = WindowedCounts(
        key_fields=["page"], size_ms=size_ms, slide_ms=slide_ms, topic="counts",
        count_field="views", late_topic="late", late_key_field="event_id",
        event_fields=["event_id"],
    )  # fmt: skip
    counts.delay_ms = delay_ms  # as windowed_counts sets it
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


def _timers(t: TwsTester, page: str) -> list[int]:
    t.handle.setGroupingKey(page)
    return list(t.handle.listTimers())


def test_a_window_is_written_with_the_input_that_moves_the_watermark_past_it() -> None:
    t = _tester(delay_ms=5)
    # ts up to 14 in this micro-batch: the watermark it sets is 9, short of window 0's end
    assert _feed(t, ("/", 0, 2), ("/", 10, 1), ("/a", 0, 1), batch_max_ts=14) == []
    assert _state(t, "/") == {"counts": {"0": 2, "10": 1}, "timers": [10]}
    assert _out(t.setWatermark(9)) == []  # Spark's watermark after that batch
    # ts up to 26 now: the batch's end sets the watermark to 21, past windows 0 and 10
    written = _feed(t, ("/", 20, 1), batch_max_ts=26)
    assert [(v["window_start"], v["views"]) for _, _, v in written] == [(0, 2), (10, 1)]
    assert _state(t, "/") == {"counts": {"20": 1}, "timers": [30]}
    assert _timers(t, "/") == [30]  # the timer at 10 deleted, not left to find nothing
    # "/a" had no input in that batch: its timer writes its window once the watermark is 21
    assert [(k["page"], v["window_start"]) for _, k, v in _out(t.setWatermark(21))] == [("/a", 0)]
    # in the next batch, a pane of a window written early is late, as Spark would have it
    late = _feed(t, ("/", 10, 1), ("/", 20, 1), batch_max_ts=27)
    assert [(topic, key) for topic, key, _ in late] == [("late", {"event_id": "/10-0"})]
    assert "(watermark 21)" in late[0][2]["reason"]
    assert _state(t, "/") == {"counts": {"20": 2}, "timers": [30]}


def test_without_a_delay_only_the_timers_write() -> None:
    t = _tester()  # no delay_ms: what batch_max_ts says is not used
    assert _feed(t, ("/", 0, 1), batch_max_ts=1_000) == []
    assert [v["window_start"] for _, _, v in _out(t.setWatermark(10))] == [0]


_EVENT = pa.schema([("page", pa.string()), ("ts", pa.int64()), ("event_id", pa.string())])
_EVENTS = st.lists(
    st.lists(st.tuples(st.sampled_from(["/", "/a", "/b"]), st.integers(0, 120)), max_size=10),
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(
    batches=_EVENTS,
    delay_ms=st.integers(0, 30),
    window=st.sampled_from([(10, 10), (20, 10), (30, 10)]),
)
def test_writing_early_changes_no_result_and_is_never_later(
    batches: list[list[tuple[str, int]]], delay_ms: int, window: tuple[int, int]
) -> None:
    """Micro-batches as Spark runs them: each batch's events counted into panes by two
    source tasks (each pane row with its task's greatest ts), a call per key with the
    watermark of the batches before, then Spark's new watermark (the greatest ts so far
    less the delay), whose timers fire before the next batch's input. The same results,
    window for window and late event for late event, with and without the early write."""
    runs = [_run(batches, delay_ms, window, early=early) for early in (False, True)]
    (timed, timed_at), (early, early_at) = runs
    assert early == timed
    assert all(early_at[window] <= timed_at[window] for window in timed_at)


def _run(
    batches: list[list[tuple[str, int]]], delay_ms: int, window: tuple[int, int], *, early: bool
) -> tuple[list[Any], dict[Any, int]]:
    size_ms, slide_ms = window
    t = _tester(delay_ms if early else None, size_ms, slide_ms)
    counter = t.processor.pane_counter()
    out: list[Any] = []
    written_at: dict[Any, int] = {}

    def collect(rows: list[tuple[str, Any, Any]], at: int) -> None:
        for topic, key, value in rows:
            out.append((topic, json.dumps(key, sort_keys=True), json.dumps(value, sort_keys=True)))
            if topic == "counts":
                written_at[(key["page"], key["window_start"])] = at

    watermark, seen = 0, None
    for at, events in enumerate(batches):
        rows = [
            {"page": page, "ts": ts, "event_id": f"{at}-{i}"} for i, (page, ts) in enumerate(events)
        ]
        half = len(rows) // 2
        tasks = [pa.RecordBatch.from_pylist(part, _EVENT) for part in (rows[:half], rows[half:])]
        panes = pd.concat([b.to_pandas() for b in counter(iter(tasks))] or [pd.DataFrame()])
        for page in sorted(set(panes["page"])) if len(panes) else []:
            collect(_out(t.testInPandas(page, panes[panes["page"] == page])), at)
        if events:
            seen = max([ts for _, ts in events] + ([] if seen is None else [seen]))
        if seen is not None and seen - delay_ms > watermark:
            watermark = seen - delay_ms
            collect(_out(t.setWatermark(watermark)), at + 1)
    collect(_out(t.setWatermark(10**9)), len(batches) + 1)
    return sorted(out), written_at
