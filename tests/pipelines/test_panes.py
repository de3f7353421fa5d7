"""count_panes: the partial aggregation in front of the windowed-count operator (pure Arrow,
no Spark)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from riverbed.pipelines.operators.windowed_counts import WindowedCounts, count_panes

FIELDS = ["event_id", "user_id", "page", "ts"]
SCHEMA = pa.schema(
    [("event_id", pa.string()), ("user_id", pa.string()), ("page", pa.string()), ("ts", pa.int64())]
)
EVENTS = st.lists(
    st.fixed_dictionaries(
        {
            "event_id": st.one_of(st.none(), st.text(max_size=3)),
            "user_id": st.one_of(st.none(), st.sampled_from(["u1", "u2"])),
            "page": st.one_of(st.none(), st.sampled_from(["/", "/a", "/b", "/é"])),
            "ts": st.one_of(st.none(), st.integers(-(10**6), 10**6)),
        }
    ),
    max_size=60,
)


def read(blob: bytes) -> list[dict[str, Any]]:
    with pa.ipc.open_stream(blob) as reader:
        return list(reader.read_all().to_pylist())


@given(events=EVENTS, slide=st.sampled_from([1, 7, 1000, 60_000]))
def test_each_pane_has_the_count_and_the_events_of_its_key_and_interval(
    events: list[dict[str, Any]], slide: int
) -> None:
    batch = pa.RecordBatch.from_pylist(events, schema=SCHEMA)
    panes = count_panes(
        batch,
        key_fields=["page"],
        slide_ms=slide,
        required=["page", "ts", "event_id"],
        event_fields=FIELDS,
    )
    expected: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for event in events:
        if event["page"] is not None and event["ts"] is not None and event["event_id"] is not None:
            expected[(event["page"], event["ts"] // slide * slide)].append(event)
    seen: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in panes.to_pylist():
        pane = (row["page"], row["pane_start"])
        assert pane not in seen, "one row per key and pane"
        seen[pane] = read(row["pane_rows"])
        assert row["pane_events"] == len(seen[pane])
    key = lambda e: (e["event_id"], e["ts"], e["user_id"] or "")  # noqa: E731
    assert {p: sorted(e, key=key) for p, e in seen.items()} == {
        p: sorted(e, key=key) for p, e in expected.items()
    }


def test_without_event_fields_only_the_counts_are_kept() -> None:
    batch = pa.RecordBatch.from_pylist(
        [{"event_id": "a", "user_id": "u", "page": "/", "ts": 5}] * 3
        + [{"event_id": "b", "user_id": "u", "page": "/", "ts": 15}],
        schema=SCHEMA,
    )
    panes = count_panes(
        batch, key_fields=["page"], slide_ms=10, required=["page", "ts"], event_fields=[]
    )
    assert panes.to_pylist() == [
        {"page": "/", "pane_start": 0, "pane_events": 3, "pane_rows": b""},
        {"page": "/", "pane_start": 10, "pane_events": 1, "pane_rows": b""},
    ]


def test_a_batch_of_incomplete_events_gives_no_pane() -> None:
    batch = pa.RecordBatch.from_pylist(
        [{"event_id": "a", "user_id": "u", "page": None, "ts": 5}], schema=SCHEMA
    )
    panes = count_panes(
        batch, key_fields=["page"], slide_ms=10, required=["page", "ts"], event_fields=FIELDS
    )
    assert panes.num_rows == 0
    assert panes.schema.names == ["page", "pane_start", "pane_events", "pane_rows"]


def _json_panes(*values: bytes | None) -> list[dict[str, Any]]:
    counter = WindowedCounts(
        key_fields=["page"], size_ms=10, slide_ms=10, topic="out", count_field="views",
        late_topic=None, late_key_field="event_id", event_fields=FIELDS,
    )  # fmt: skip
    step = counter.pane_counter(SCHEMA)
    batch = pa.RecordBatch.from_pydict({"value": pa.array(values, pa.binary())})
    return [row for out in step(iter([batch])) for row in out.to_pylist()]


def test_the_json_pane_step_parses_the_values_and_carries_the_batch_s_latest_ts() -> None:
    rows = _json_panes(
        b'{"page": "/", "ts": 5}', b"not json", None, b'{"page": "/", "ts": 7}',
        b'{"ts": 31}', b'{"page": "/a", "ts": 12}',
    )  # fmt: skip
    assert rows == [
        {"page": "/", "pane_start": 0, "pane_events": 2, "pane_rows": b"", "batch_max_ts": 31},
        {"page": "/a", "pane_start": 10, "pane_events": 1, "pane_rows": b"", "batch_max_ts": 31},
    ]


def test_event_times_without_a_pane_still_reach_the_watermark() -> None:
    # No page: no pane, but Spark's watermark on the parsed events would see ts 40.
    assert _json_panes(b'{"ts": 40}', b'{"ts": 25, "user_id": "u"}') == [
        {"page": None, "pane_start": 0, "pane_events": 0, "pane_rows": b"", "batch_max_ts": 40}
    ]
    assert _json_panes(b"not json", b'{"page": "/"}') == []  # no event time: nothing at all
