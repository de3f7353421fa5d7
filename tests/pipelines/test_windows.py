"""The pure window logic of riverbed.pipelines.operators.windows, against brute-force references."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from riverbed.pipelines.operators.windows import (
    counts_by_window,
    late_reason,
    window_starts,
    windows_of,
)

TIMES = st.integers(min_value=-(10**13), max_value=10**13)
SHAPES = st.sampled_from([(60_000, 60_000), (300_000, 60_000), (10, 5), (7, 1), (1, 1)])


@given(ts=TIMES, shape=SHAPES)
def test_the_windows_of_an_event_are_exactly_those_containing_it(
    ts: int, shape: tuple[int, int]
) -> None:
    size, slide = shape
    windows = windows_of(ts, size, slide)
    assert len(windows) == size // slide
    assert all(
        start <= ts < end and end - start == size and start % slide == 0 for start, end in windows
    )
    first = ts - ts % slide - size
    brute = [(s, s + size) for s in range(first, ts + 1, slide) if s <= ts < s + size]
    assert windows == brute


@given(ts=st.lists(TIMES, max_size=30), shape=SHAPES)
def test_the_vectorised_windows_agree(ts: list[int], shape: tuple[int, int]) -> None:
    size, slide = shape
    rows, starts = window_starts(np.array(ts, dtype=np.int64), size, slide)
    pairs = list(zip(rows.tolist(), starts.tolist(), strict=True))
    assert pairs == [
        (i, start) for i, t in enumerate(ts) for start, _ in windows_of(t, size, slide)
    ]


def test_bad_window_shapes() -> None:
    for size, slide in [(0, 1), (10, 3), (5, 10), (10, -5)]:
        with pytest.raises(ValueError, match="multiple of the slide"):
            windows_of(0, size, slide)


@given(ts=st.lists(st.integers(0, 10**6), max_size=40), watermark=st.integers(-1, 10**6))
def test_counts_and_late_rows(ts: list[int], watermark: int) -> None:
    counts, late_rows, late_starts = counts_by_window(
        np.array(ts, dtype=np.int64), 1000, 500, watermark
    )
    expected: dict[int, int] = {}
    late = []
    for i, t in enumerate(ts):
        for start, end in windows_of(t, 1000, 500):
            if end <= watermark:
                late.append((i, start))
            else:
                expected[start] = expected.get(start, 0) + 1
    assert counts == expected
    assert list(zip(late_rows.tolist(), late_starts.tolist(), strict=True)) == late


def test_late_reason_names_the_window_and_the_watermark() -> None:
    assert late_reason(0, 60_000, 90_000) == (
        "too late: window [0, 60000) was already complete (watermark 90000)"
    )


@given(
    panes=st.lists(st.tuples(st.integers(-2000, 2000), st.integers(1, 5)), max_size=20),
    watermark=st.integers(-2000, 3000),
)
def test_counts_with_weights_equal_the_counts_of_the_repeated_events(
    panes: list[tuple[int, int]], watermark: int
) -> None:
    ts = np.array([t - t % 500 for t, _ in panes], dtype=np.int64)
    weights = np.array([w for _, w in panes], dtype=np.int64)
    counts, late_rows, late_starts = counts_by_window(ts, 1000, 500, watermark, weights)
    repeated, _, _ = counts_by_window(np.repeat(ts, weights), 1000, 500, watermark)
    assert counts == repeated
    _, plain_rows, plain_starts = counts_by_window(ts, 1000, 500, watermark)
    assert late_rows.tolist() == plain_rows.tolist()
    assert late_starts.tolist() == plain_starts.tolist()
