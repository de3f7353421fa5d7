"""The pure part of ``riverbed groups reset-offsets``: flag parsing and the offset plan."""

from __future__ import annotations

import argparse

import pytest

from riverbed.cli.errors import CliError
from riverbed.cli.offset_reset import (
    Bounds,
    ResetTarget,
    Strategy,
    TopicSpec,
    parse_datetime_ms,
    parse_topic_spec,
    plan_offsets,
)

JAN_1_2026_MS = 1_767_225_600_000


def test_topic_spec() -> None:
    assert parse_topic_spec("orders") == TopicSpec(topic="orders")
    assert parse_topic_spec("orders:2,0,2") == TopicSpec(topic="orders", partitions=(0, 2))
    for bad in ("", ":1", "orders:", "orders:x", "orders:-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_topic_spec(bad)


def test_datetime_with_zone_offset_and_naive_as_utc() -> None:
    assert parse_datetime_ms("2026-01-01T00:00:00Z") == JAN_1_2026_MS
    assert parse_datetime_ms("2026-01-01T01:00:00+01:00") == JAN_1_2026_MS
    assert parse_datetime_ms("2026-01-01T00:00:00") == JAN_1_2026_MS
    assert parse_datetime_ms("2026-01-01T00:00:00.250") == JAN_1_2026_MS + 250
    assert parse_datetime_ms("2026-01-01") == JAN_1_2026_MS
    for bad in ("yesterday", "2026-13-01T00:00:00", "1969-12-31T23:59:59Z"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_datetime_ms(bad)


A, B = ("t", 0), ("t", 1)
BOUNDS = {A: Bounds(earliest=10, latest=20), B: Bounds(earliest=0, latest=5)}


def plan(strategy: Strategy, value: int = 0, **kwargs: object) -> dict[tuple[str, int], int]:
    target = ResetTarget(strategy=strategy, value=value)
    options: dict[str, object] = {"committed": {A: 15, B: 3}, "bounds": BOUNDS, **kwargs}
    return plan_offsets(target, [B, A], **options)  # type: ignore[arg-type]


def test_earliest_latest_and_offset_clamped() -> None:
    assert plan(Strategy.EARLIEST) == {A: 10, B: 0}
    assert plan(Strategy.LATEST) == {A: 20, B: 5}
    assert plan(Strategy.OFFSET, 12) == {A: 12, B: 5}
    assert plan(Strategy.OFFSET, 0) == {A: 10, B: 0}
    assert list(plan(Strategy.EARLIEST)) == [A, B]  # sorted


def test_shift_clamps_and_needs_a_committed_offset() -> None:
    assert plan(Strategy.SHIFT, -2) == {A: 13, B: 1}
    assert plan(Strategy.SHIFT, -100) == {A: 10, B: 0}
    assert plan(Strategy.SHIFT, 100) == {A: 20, B: 5}
    with pytest.raises(CliError, match="no committed offset"):
        plan(Strategy.SHIFT, 1, committed={A: 15})


def test_datetime_uses_the_found_offset_or_the_end() -> None:
    assert plan(Strategy.DATETIME, JAN_1_2026_MS, by_time={A: 12, B: -1}) == {A: 12, B: 5}
    assert plan(Strategy.DATETIME, JAN_1_2026_MS, by_time={A: 3}) == {A: 10, B: 5}
