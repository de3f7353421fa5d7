"""The interval join's pure logic against brute force."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from riverbed.pipelines.operators.intervals import (
    IntervalJoinState,
    JoinInterval,
    LeftRow,
    RightRow,
)

CONDITION = JoinInterval(lower_ms=0, upper_ms=100)
ROWS = st.lists(
    st.tuples(st.booleans(), st.integers(0, 1000), st.integers(0, 4)), min_size=1, max_size=40
)


@given(rows=ROWS, batch=st.integers(1, 6), lag=st.integers(0, 300), reload=st.booleans())
def test_on_time_rows_join_exactly_the_pairs_of_brute_force(
    rows: list[tuple[bool, int, int]], batch: int, lag: int, reload: bool
) -> None:
    """Rows arrive in batches; the watermark after each batch is the latest ts minus
    ``lag``, and rows behind it are left out (late), so every row fed is on time."""
    state = IntervalJoinState()
    fed_lefts: dict[str, int] = {}
    fed_rights: list[int] = []
    pairs: list[tuple[str, int]] = []
    firsts: list[str] = []
    expired: dict[str, bool] = {}
    watermark = -(10**9)
    for i in range(0, len(rows), batch):
        lefts, rights = [], []
        for j, (is_left, ts, tag) in enumerate(rows[i : i + batch], start=i):
            if ts < watermark:
                continue
            if is_left:
                left_id = f"s{tag}"
                if left_id in fed_lefts or left_id in expired:
                    continue  # one left row per id (a duplicate is tested apart)
                fed_lefts[left_id] = ts
                lefts.append(LeftRow(id=left_id, ts=ts, fields={"n": j}))
            else:
                fed_rights.append(ts)
                rights.append(RightRow(ts=ts, fields={"n": j}))
        new, joined = state.add(CONDITION, lefts=lefts, rights=rights)
        assert [x.id for x in new] == [x.id for x in lefts]
        pairs += [(p.left.id, p.right.ts) for p in joined]
        firsts += [p.left.id for p in joined if p.first]
        watermark = max(watermark, max(ts for _, ts, _ in rows[: i + batch]) - lag)
        for left in state.expire(CONDITION, watermark):
            expired[left.id] = left.matched
        if reload:
            state = IntervalJoinState.from_json(state.to_json())
    expected = [
        (left_id, r) for left_id, ts in fed_lefts.items() for r in fed_rights if 0 <= r - ts <= 100
    ]
    assert sorted(pairs) == sorted(expected)
    assert sorted(firsts) == sorted({left_id for left_id, _ in expected})
    for left_id, matched in expired.items():
        assert matched == any(left == left_id for left, _ in expected)
        assert fed_lefts[left_id] + 100 < watermark, "expired only when no on-time match can come"


def test_a_duplicate_left_row_is_ignored_while_the_first_is_held() -> None:
    state = IntervalJoinState()
    new, _ = state.add(CONDITION, lefts=[LeftRow(id="s", ts=10, fields={})])
    assert len(new) == 1
    new, joined = state.add(
        CONDITION, lefts=[LeftRow(id="s", ts=10, fields={})], rights=[RightRow(ts=50, fields={})]
    )
    assert new == []
    assert [(p.left.id, p.first) for p in joined] == [("s", True)]


def test_expiry_times_follow_the_bounds() -> None:
    state = IntervalJoinState()
    state.add(CONDITION, lefts=[LeftRow(id="s", ts=1000, fields={})])
    state.add(CONDITION, rights=[RightRow(ts=900, fields={})])
    assert state.next_expiry_ms(CONDITION) == 901  # the right row: no on-time left after
    assert state.expire(CONDITION, 901) == []
    assert state.next_expiry_ms(CONDITION) == 1101
    assert state.expire(CONDITION, 1100) == []
    assert [x.id for x in state.expire(CONDITION, 1101)] == ["s"]
    assert state.is_empty()
    assert state.next_expiry_ms(CONDITION) is None


def test_the_state_is_one_list_and_a_version_1_state_is_still_read() -> None:
    state = IntervalJoinState()
    state.add(CONDITION, lefts=[LeftRow(id="s", ts=10, fields={"q": "kite"})])
    state.add(CONDITION, rights=[RightRow(ts=5, fields={"p": 1})])
    assert json.loads(state.to_json()) == [2, [["s", 10, {"q": "kite"}, False]], [[5, {"p": 1}]]]
    # as a checkpoint written before the list form holds it
    old = {"v": 1, "lefts": [["s", 10, {"q": "kite"}, False]], "rights": [[5, {"p": 1}]]}
    read = IntervalJoinState.from_json(json.dumps(old))
    assert read.to_json() == state.to_json()
    _, joined = read.add(CONDITION, rights=[RightRow(ts=60, fields={"p": 2})])
    assert [(p.left.id, p.left.fields, p.right.fields, p.first) for p in joined] == [
        ("s", {"q": "kite"}, {"p": 2}, True)
    ]


def test_bad_interval_and_bad_state() -> None:
    with pytest.raises(ValueError, match="empty interval"):
        JoinInterval(lower_ms=5, upper_ms=4)
    for bad in ('{"v": 2}', "[1, [], []]", "[2, []]", '"joins"'):
        with pytest.raises(ValueError, match="not an interval join state of version 1 or 2"):
            IntervalJoinState.from_json(bad)
