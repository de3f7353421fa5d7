"""Pure logic of the source's offsets: JSON, range splitting and admission control."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from riverbed.spark.source.admission import TriggerDelay, backlog, rate_limit
from riverbed.spark.source.offsets import (
    SMALL_BATCH_RECORDS,
    SMALL_BATCH_TASKS,
    OffsetRange,
    offsets_from_json,
    offsets_to_json,
    pack_ranges,
    parse_offsets_option,
    split_ranges,
)

offset_maps = st.dictionaries(
    st.tuples(st.text(min_size=1, max_size=5), st.integers(0, 200)),
    st.integers(0, 2**63 - 1),
    max_size=20,
)


@given(offset_maps)
def test_json_round_trip(offsets: dict[tuple[str, int], int]) -> None:
    encoded = json.dumps(offsets_to_json(offsets))
    assert offsets_from_json(json.loads(encoded)) == offsets


@given(offset_maps)
def test_json_is_deterministic(offsets: dict[tuple[str, int], int]) -> None:
    shuffled = dict(reversed(list(offsets.items())))
    assert json.dumps(offsets_to_json(shuffled)) == json.dumps(offsets_to_json(offsets))


def test_json_is_spark_kafka_source_format() -> None:
    offsets = {("b", 10): 5, ("b", 2): 7, ("a", 0): 23}
    # Partitions in numeric order, as Spark's JsonUtils: "2" before "10".
    assert json.dumps(offsets_to_json(offsets)) == '{"a": {"0": 23}, "b": {"2": 7, "10": 5}}'


@pytest.mark.parametrize(
    "text",
    ['["a"]', '{"a": 1}', '{"a": {"x": 1}}', '{"a": {"0": "1"}}', '{"a": {"0": true}}', "{"],
)
def test_bad_offsets_json_names_the_option(text: str) -> None:
    with pytest.raises(ValueError, match="option 'startingOffsets': expected JSON such as"):
        parse_offsets_option("startingOffsets", text)


def r(start: int, end: int, partition: int = 0) -> OffsetRange:
    return OffsetRange(topic="t", partition=partition, start=start, end=end)


def test_split_ranges_without_options_drops_empty_ranges() -> None:
    ranges = [r(0, 10), r(5, 5, 1), r(3, 4, 2)]
    assert split_ranges(ranges, min_partitions=None, max_records_per_partition=None) == [
        r(0, 10),
        r(3, 4, 2),
    ]


def test_split_ranges_min_partitions_splits_big_ranges_only() -> None:
    # 120 offsets over 4: ideal 30; round(10 / 30) = 0 -> kept whole, round(100 / 30) = 3
    ranges = [r(0, 10, 0), r(0, 100, 1), r(0, 10, 2)]
    got = split_ranges(ranges, min_partitions=4, max_records_per_partition=None)
    assert got == [r(0, 10, 0), r(0, 33, 1), r(33, 66, 1), r(66, 100, 1), r(0, 10, 2)]


def test_split_ranges_max_records_per_partition() -> None:
    got = split_ranges([r(0, 25), r(0, 3, 1)], min_partitions=None, max_records_per_partition=10)
    assert got == [r(0, 8), r(8, 16), r(16, 25), r(0, 3, 1)]


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), max_size=8),
    st.none() | st.integers(1, 20),
    st.none() | st.integers(1, 300),
)
def test_split_ranges_cover_exactly_the_same_offsets(
    bounds: list[tuple[int, int]], min_partitions: int | None, max_records: int | None
) -> None:
    ranges = [r(min(a, b), max(a, b), i) for i, (a, b) in enumerate(bounds)]
    pieces = split_ranges(
        ranges, min_partitions=min_partitions, max_records_per_partition=max_records
    )
    covered = sorted((p.partition, o) for p in pieces for o in range(p.start, p.end))
    assert covered == sorted((x.partition, o) for x in ranges for o in range(x.start, x.end))
    assert all(p.size > 0 for p in pieces)
    if max_records is not None:
        assert all(p.size <= max_records for p in pieces)


def test_a_small_batch_is_packed_into_two_tasks_and_a_large_one_is_not() -> None:
    small = [r(0, 100, 0), r(0, 4_000, 1), r(0, 10, 2), r(0, 3_000, 3)]
    assert pack_ranges(small) == [(r(0, 4_000, 1),), (r(0, 100, 0), r(0, 10, 2), r(0, 3_000, 3))]
    large = [r(0, 5_000, 0), r(0, 5_001, 1), r(0, 1, 2)]
    assert pack_ranges(large) == [(x,) for x in large]
    assert pack_ranges(small[:2]) == [(small[0],), (small[1],)]
    assert pack_ranges([]) == []


@given(st.lists(st.integers(1, 6_000), max_size=8))
def test_packed_tasks_hold_every_range_once(sizes: list[int]) -> None:
    ranges = [r(0, size, i) for i, size in enumerate(sizes)]
    tasks = pack_ranges(ranges)
    assert sorted(x.partition for task in tasks for x in task) == list(range(len(sizes)))
    assert all(task for task in tasks)
    if sum(sizes) <= SMALL_BATCH_RECORDS:
        assert len(tasks) == min(len(sizes), SMALL_BATCH_TASKS)
    else:
        assert len(tasks) == len(sizes)


def test_rate_limit_is_proportional_to_backlog() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 50}
    latest = {("t", 0): 300, ("t", 1): 200, ("t", 2): 50}  # backlogs 300, 100, 0
    assert rate_limit(100, start, latest) == {("t", 0): 75, ("t", 1): 125, ("t", 2): 50}


def test_rate_limit_never_starves_a_small_partition() -> None:
    start = {("t", 0): 0, ("t", 1): 0}
    latest = {("t", 0): 10_000, ("t", 1): 1}
    # 10 * 1 / 10001 < 1 is rounded up to one offset, as Spark's Math.ceil
    assert rate_limit(10, start, latest) == {("t", 0): 9, ("t", 1): 1}


def test_rate_limit_new_partitions_start_at_zero_and_backwards_ends_stay() -> None:
    start = {("t", 0): 500}
    latest = {("t", 0): 400, ("t", 1): 40}
    assert rate_limit(10, start, latest) == {("t", 0): 400, ("t", 1): 10}


def test_rate_limit_with_a_large_limit_reads_everything() -> None:
    start = {("t", 0): 0}
    latest = {("t", 0): 5, ("t", 1): 7}
    assert rate_limit(2**63 - 1, start, latest) == latest


@given(
    st.dictionaries(st.integers(0, 5), st.tuples(st.integers(0, 10**6), st.integers(0, 10**6))),
    st.integers(1, 10**5),
)
def test_rate_limit_stays_between_start_and_latest(
    bounds: dict[int, tuple[int, int]], limit: int
) -> None:
    start = {("t", p): a for p, (a, _) in bounds.items()}
    latest = {("t", p): b for p, (_, b) in bounds.items()}
    end = rate_limit(limit, start, latest)
    assert end.keys() == latest.keys()
    read = 0
    for key, offset in end.items():
        if latest[key] >= start[key]:
            assert start[key] <= offset <= latest[key]
            read += offset - start[key]
    # Spark's rounding: at most one extra offset per partition
    assert read <= limit + len(bounds)
    assert read <= backlog(start, latest)
    if limit >= backlog(start, latest):
        assert end == latest


def test_trigger_delay_waits_for_min_offsets_until_the_delay_runs_out() -> None:
    delay = TriggerDelay(min_offsets=100, max_delay_ms=1000)
    assert not delay.hold_back(5, now_ms=0)  # the first batch never waits
    assert delay.hold_back(5, now_ms=10)
    assert delay.hold_back(99, now_ms=999)
    assert not delay.hold_back(100, now_ms=1000 - 1)  # enough offsets: go, clock restarts
    assert delay.hold_back(1, now_ms=1500)
    assert not delay.hold_back(1, now_ms=1999)  # 1000 ms since the last batch
    assert delay.hold_back(0, now_ms=2000)
