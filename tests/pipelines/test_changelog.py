"""Changelogs as tables (riverbed.pipelines.operators.changelog): parsing, against a fake
capture that keeps the true table, with replays and compaction."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from riverbed.pipelines.operators.changelog import (
    UNAVAILABLE_VALUE,
    Change,
    MalformedChange,
    Op,
    RowState,
    SourcePosition,
    Table,
    lsn_of,
    parse_change,
)
from riverbed.pipelines.operators.json_rows import json_text
from tests.support.fake_capture import FakeCapture, Record

MISSING: Any = object()
"""For :func:`envelope`: leave the field out."""


def envelope(**fields: Any) -> dict[str, Any]:
    """A valid envelope with ``fields`` changed (``lsn``, ``commitLsn`` and ``ts_ms`` are
    those of the source block)."""
    source = {"ts_ms": 5, "lsn": "0/16B3748", "commitLsn": "0/16B3750"}
    value = {"before": None, "after": {"id": 1, "v": "a"}, "op": "c", "ts_ms": 9, "source": source}
    for name, field_value in fields.items():
        target = source if name in source else value
        if field_value is MISSING:
            del target[name]
        else:
            target[name] = field_value
    return value


def test_a_change_parses() -> None:
    change = parse_change(b'{"id": 1}', json.dumps(envelope()).encode())
    assert change == Change(
        key={"id": 1}, op=Op.CREATE, before=None, after={"id": 1, "v": "a"}, ts_ms=5,
        position=SourcePosition(0x16B3750, 0x16B3748),
    )  # fmt: skip
    assert parse_change(b'{"id": 1}', None) == Change(
        key={"id": 1}, op=Op.TOMBSTONE, before=None, after=None, ts_ms=None, position=None
    )
    plain = envelope(lsn=7, commitLsn=MISSING, op="d", after=None, before={"id": 1})
    deleted = parse_change(b'{"id": 1}', json.dumps(plain).encode())
    assert (deleted.op, deleted.position, deleted.before) == (Op.DELETE, (7, 7), {"id": 1})
    truncate = parse_change(b"{}", json.dumps(envelope(op="t", after=None)).encode())
    assert (truncate.op, truncate.key) == (Op.TRUNCATE, {})


def test_lsns_in_both_forms() -> None:
    assert lsn_of("0/16B3748") == 0x16B3748
    assert lsn_of("1/0") == 1 << 32
    assert lsn_of("FFFFFFFF/FFFFFFFF") == (1 << 64) - 1
    assert lsn_of(12) == 12
    for bad in ["", "0/", "/1", "1/2/3", "0x1/2", "G/1", "100000000/0", -1, True, 1.5, None, []]:
        with pytest.raises(MalformedChange, match="not an LSN"):
            lsn_of(bad)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (None, b"{}", "without a key"),
        (b"[1]", None, "the key is not a JSON object"),
        (b"{", None, "key is not JSON"),
        (b"{}", b"\xff\xfe\x00", "value is not JSON"),
        (b"{}", b"[" * 100_000, "value is not JSON"),
        (b"{}", b'{"op": "c"} trailing', "value is not JSON"),
        (b"{}", b"[]", "not a JSON object"),
        (b"{}", json.dumps(envelope(op="x")).encode(), "unknown op"),
        (b"{}", json.dumps(envelope(op=["c"])).encode(), "unknown op"),
        (b"{}", json.dumps(envelope(op="tombstone")).encode(), "unknown op"),
        (b"{}", json.dumps(envelope(op=MISSING)).encode(), "unknown op"),
        (b"{}", json.dumps(envelope(source=[])).encode(), "no source"),
        (b"{}", json.dumps(envelope(ts_ms=MISSING)).encode(), "ts_ms is not an integer"),
        (b"{}", json.dumps(envelope(ts_ms=True)).encode(), "ts_ms is not an integer"),
        (b"{}", json.dumps(envelope(ts_ms=1.0)).encode(), "ts_ms is not an integer"),
        (b"{}", json.dumps(envelope(lsn=MISSING)).encode(), "not an LSN"),
        (b"{}", json.dumps(envelope(commitLsn="0/x")).encode(), "not an LSN"),
        (b"{}", json.dumps(envelope(before=MISSING)).encode(), "lacks before or after"),
        (b"{}", json.dumps(envelope(after=[1])).encode(), "after is not a JSON object"),
        (b"{}", json.dumps(envelope(after=None)).encode(), "op c without an after row"),
        (b"{}", json.dumps(envelope(op="d")).encode(), "op d with an after row"),
    ],
)
def test_malformed_records_raise_malformed_change(
    key: bytes | None, value: bytes | None, message: str
) -> None:
    with pytest.raises(MalformedChange, match=message):
        parse_change(key, value)


def _parses_or_is_malformed(key: bytes | None, value: bytes | None) -> None:
    with contextlib.suppress(MalformedChange):
        parse_change(key, value)


@given(key=st.none() | st.binary(max_size=40), value=st.none() | st.binary(max_size=200))
def test_any_bytes_parse_or_raise_malformed_change(key: bytes | None, value: bytes | None) -> None:
    _parses_or_is_malformed(key, value)


SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
JSON = st.recursive(
    SCALARS | st.floats(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
FIELDS = ["before", "after", "op", "source", "ts_ms", "lsn", "commitLsn"]


@given(
    replaced=st.dictionaries(st.sampled_from(FIELDS), JSON | st.just(MISSING), max_size=4),
    key=JSON,
    cut=st.integers(0, 400),
)
def test_damaged_envelopes_parse_or_raise_malformed_change(
    replaced: dict[str, Any], key: Any, cut: int
) -> None:
    value = json.dumps(envelope(**replaced)).encode()
    for damaged in (value, value[:cut], value + b"}", value[:cut] + value[cut + 1 :]):
        _parses_or_is_malformed(json.dumps(key).encode(), damaged)
        _parses_or_is_malformed(b'{"id": 1}', damaged)


def tombstone(key: int = 1) -> Change:
    return parse_change(json.dumps({"id": key}).encode(), None)


def change(op: str, *, commit: int, lsn: int = 0, after: Any = None, key: int = 1) -> Change:
    value = envelope(op=op, commitLsn=commit, lsn=lsn, after=after, before=None)
    return parse_change(json.dumps({"id": key}).encode(), json.dumps(value).encode())


def test_a_change_at_or_below_the_applied_position_is_ignored() -> None:
    state = RowState()
    assert state.apply(change("c", commit=10, lsn=5, after={"v": 1}))
    assert not state.apply(change("c", commit=10, lsn=5, after={"v": 1}))  # a replay
    # The commit LSN comes first: a smaller change LSN in a later transaction is newer.
    assert state.apply(change("u", commit=20, lsn=1, after={"v": 2}))
    assert not state.apply(change("u", commit=10, lsn=9, after={"v": 3}))
    assert (state.row, state.position) == ({"v": 2}, (20, 1))


def test_a_tombstone_goes_with_its_delete() -> None:
    state = RowState()
    state.apply(change("c", commit=1, after={"v": 1}))
    assert state.apply(change("d", commit=2))
    assert not state.apply(tombstone())
    assert state.apply(change("c", commit=3, after={"v": 3}))
    # The delete and its tombstone again: both ignored, the row of the create stays.
    assert not state.apply(change("d", commit=2))
    assert not state.apply(tombstone())
    assert state.row == {"v": 3}
    # A tombstone whose delete compaction removed deletes the row; what follows is newer.
    assert state.apply(tombstone())
    assert (state.row, state.position) == (None, None)
    assert state.apply(change("c", commit=3, after={"v": 3}))
    assert state.row == {"v": 3}
    # Only a tombstone right after an ignored *delete* is ignored: a replayed update, then
    # the tombstone of a newer delete that compaction removed.
    assert not state.apply(change("c", commit=3, after={"v": 3}))
    assert state.apply(tombstone())
    assert state.row is None


def test_snapshot_rows_always_apply_and_a_replay_from_the_snapshot_ends_the_same() -> None:
    log = [
        change("r", commit=100, lsn=100, after={"v": "snap"}),
        change("u", commit=150, lsn=90, after={"v": "u1"}),
        change("u", commit=160, lsn=95, after={"v": "u2"}),
    ]
    state = RowState()
    for c in log:
        assert state.apply(c)
    assert state.apply(log[0])  # a snapshot row always applies
    assert state.row == {"v": "snap"}
    for c in log[1:]:
        assert state.apply(c)
    assert (state.row, state.position) == ({"v": "u2"}, (160, 95))
    # The trigger-based capture's snapshot is at position 0: it applies all the same.
    assert state.apply(change("r", commit=0, lsn=0, after={"v": "again"}))
    assert state.row == {"v": "again"}


def test_unavailable_values_keep_the_previous_value() -> None:
    state = RowState()
    state.apply(change("c", commit=1, after={"id": 1, "doc": "long", "n": 1}))
    state.apply(change("u", commit=2, after={"id": 1, "doc": UNAVAILABLE_VALUE, "n": 2}))
    assert state.row == {"id": 1, "doc": "long", "n": 2}
    state.apply(change("d", commit=3))
    state.apply(change("c", commit=4, after={"id": 1, "doc": UNAVAILABLE_VALUE, "n": 3}))
    assert state.row == {"id": 1, "doc": UNAVAILABLE_VALUE, "n": 3}  # nothing to keep


def test_a_key_change_and_a_truncate() -> None:
    clock = [0]
    capture = FakeCapture("id", clock)
    table = Table()
    for unit in [capture.insert({"id": 1, "v": "a"}), capture.insert({"id": 2, "v": "b"})]:
        for record in unit:
            table.apply(parse_change(*record))
    for record in capture.update(1, {"id": 3, "v": "a"}):
        table.apply(parse_change(*record))
    assert sorted(table.rows(), key=str) == [({"id": 2}, {"id": 2, "v": "b"}),
                                             ({"id": 3}, {"id": 3, "v": "a"})]  # fmt: skip
    truncate = envelope(op="t", after=None, commitLsn=clock[0] + 1, lsn=clock[0] + 1)
    assert table.apply(parse_change(b"{}", json.dumps(truncate).encode()))
    assert len(table) == 0
    assert table.get({"id": 2}) is None
    stale = change("u", commit=clock[0], lsn=clock[0], after={"v": "old"}, key=2)
    assert not table.apply(stale)  # positions survive the truncate


ACTIONS = st.lists(
    st.tuples(st.sampled_from(["insert", "update", "rekey", "delete", "replay"]),
              st.integers(0, 3), st.integers(0, 2)),
    max_size=30,
)  # fmt: skip


Truth = dict[str, Any]


def run_capture(
    capture: FakeCapture, actions: list[tuple[str, int, int]]
) -> list[tuple[list[Record], Truth]]:
    """The units that the actions write (a replay re-sends an earlier unit as it was), each
    with the true table after it (rows by the JSON text of their key)."""
    units: list[tuple[list[Record], Truth]] = []
    for action, key, value in actions:
        if action == "replay" and units:
            unit = units[(key * 3 + value) % len(units)][0]
        elif action == "insert" and key not in capture.rows:
            unit = capture.insert({"id": key, "v": value})
        elif action in ("update", "rekey") and capture.rows:
            old = sorted(capture.rows)[key % len(capture.rows)]
            new = key if action == "rekey" and key not in capture.rows else old
            unit = capture.update(old, {"id": new, "v": value})
        elif action == "delete" and key in capture.rows:
            unit = capture.delete(key)
        else:
            continue
        units.append((unit, truth(capture)))
    return units


def truth(capture: FakeCapture) -> Truth:
    return {json_text({capture.key_column: k}): row for k, row in capture.rows.items()}


def table_rows(table: Table) -> Truth:
    return {json_text(key): row for key, row in table.rows()}


@given(actions=ACTIONS, full=st.booleans(), snapshot=st.booleans())
def test_the_table_follows_its_changelog_through_replays(
    actions: list[tuple[str, int, int]], full: bool, snapshot: bool
) -> None:
    capture = FakeCapture("id", [0], full=full)
    table = Table()
    if snapshot:
        capture.rows = {1: {"id": 1, "v": 9}, 3: {"id": 3, "v": 9}}
        for record in capture.snapshot():
            assert table.apply(parse_change(*record))
    for unit, expected in run_capture(capture, actions):
        for record in unit:
            table.apply(parse_change(*record))
        assert table_rows(table) == expected
        table = Table.from_json(table.to_json())


@given(actions=ACTIONS, split=st.integers(0, 200), keep=st.lists(st.booleans(), max_size=200))
def test_a_reader_lagging_behind_compaction_ends_with_the_table(
    actions: list[tuple[str, int, int]], split: int, keep: list[bool]
) -> None:
    capture = FakeCapture("id", [0])
    no_replays = [a for a in actions if a[0] != "replay"]
    log = [record for unit, _ in run_capture(capture, no_replays) for record in unit]
    split = min(split, len(log))
    # Compaction may remove any record of the unread part that a later record of its key
    # supersedes (it always keeps the last one).
    last = {key: i for i, (key, _) in enumerate(log)}
    unread = [
        r for i, r in enumerate(log[split:], split)
        if last[r[0]] == i or (keep[i] if i < len(keep) else True)
    ]  # fmt: skip
    table = Table()
    for record in log[:split] + unread:
        table.apply(parse_change(*record))
    assert table_rows(table) == truth(capture)


@given(actions=ACTIONS, start=st.integers(0, 200))
def test_a_replayed_tail_of_the_log_ends_with_the_table(
    actions: list[tuple[str, int, int]], start: int
) -> None:
    capture = FakeCapture("id", [0])
    log = [record for unit, _ in run_capture(capture, actions) for record in unit]
    table = Table()
    for record in log + log[min(start, len(log)) :]:
        table.apply(parse_change(*record))
    assert table_rows(table) == truth(capture)


@given(
    row=st.none() | st.dictionaries(st.text(max_size=5), SCALARS | st.floats(allow_nan=False)),
    position=st.none() | st.tuples(st.integers(0, 2**64), st.integers(0, 2**64)),
    skipped_delete=st.booleans(),
)
def test_row_state_json_round_trips(
    row: dict[str, Any] | None, position: tuple[int, int] | None, skipped_delete: bool
) -> None:
    state = RowState(
        row=row,
        position=None if position is None else SourcePosition(*position),
        skipped_delete=skipped_delete,
    )
    assert RowState.from_json(state.to_json()) == state
