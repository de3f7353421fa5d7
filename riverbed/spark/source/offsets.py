"""Offsets of the ``riverbed`` source: per-partition positions, their JSON, and offset ranges.

An offset of the stream is the *next offset to read* of every partition the query knows,
in the JSON of Spark's Kafka source (``KafkaSourceOffset``)::

    {"clicks": {"0": 23, "1": 45}, "orders": {"0": 7}}

Spark stores it in the checkpoint and decides "no new data" by comparing these JSON strings,
so :func:`offsets_to_json` builds it deterministically: topics sorted, partitions in numeric
order (as Spark's ``JsonUtils``), keys as strings. The same format, with -2 meaning earliest
and -1 latest, is the ``startingOffsets``/``endingOffsets`` option.

:func:`split_ranges` is Spark's ``KafkaOffsetRangeCalculator``: one range per partition,
divided further for ``maxRecordsPerPartition`` and ``minPartitions``. :func:`pack_ranges`
puts the ranges of a small micro-batch in fewer tasks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetMap",
    "OffsetRange",
    "Partition",
    "offsets_from_json",
    "offsets_to_json",
    "pack_ranges",
    "parse_offsets_option",
    "split_ranges",
]

Partition = tuple[str, int]
"""(topic, partition)."""
OffsetMap = dict[Partition, int]
"""The next offset to read of each partition (or, in options, a timestamp or -2/-1)."""

EARLIEST = -2
"""In ``startingOffsets``/``endingOffsets`` JSON: the partition's log start offset (Kafka's
ListOffsets EARLIEST_TIMESTAMP)."""
LATEST = -1
"""In ``startingOffsets``/``endingOffsets`` JSON: the partition's end offset (LATEST_TIMESTAMP)."""

OFFSETS_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'


def offsets_to_json(offsets: Mapping[Partition, int]) -> dict[str, dict[str, int]]:
    """The dict Spark serializes with ``json.dumps``: sorted, so equal maps give equal JSON."""
    result: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        result.setdefault(topic, {})[str(partition)] = offsets[(topic, partition)]
    return result


def offsets_from_json(value: Mapping[str, Any]) -> OffsetMap:
    """The inverse of :func:`offsets_to_json`, for offsets Spark hands back (and the options).

    Raises ``ValueError`` for anything that is not ``{topic: {"partition": offset}}``.
    """
    offsets: OffsetMap = {}
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a JSON object of topics, got {value!r}")
    for topic, partitions in value.items():
        if not isinstance(topic, str) or not isinstance(partitions, Mapping):
            raise ValueError(f"expected {{partition: offset}} for topic {topic!r}")
        for partition, offset in partitions.items():
            try:
                number = int(partition)
            except (TypeError, ValueError):
                raise ValueError(f"partition {partition!r} of {topic!r} is not a number") from None
            if number < 0 or isinstance(offset, bool) or not isinstance(offset, int):
                raise ValueError(f"bad partition or offset {partition!r}: {offset!r} of {topic!r}")
            offsets[(topic, number)] = offset
    return offsets


def parse_offsets_option(name: str, text: str) -> OffsetMap:
    """An option's JSON offsets (or timestamps) per partition; ``ValueError`` naming ``name``."""
    try:
        return offsets_from_json(json.loads(text))
    except ValueError as e:
        raise ValueError(
            f"option {name!r}: expected JSON such as {OFFSETS_EXAMPLE}, got {text!r} ({e})"
        ) from None


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one partition: what one Spark task reads."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def _divide(offset_range: OffsetRange, parts: int) -> list[OffsetRange]:
    """``parts`` consecutive pieces; the last takes the rounding (``getDividedPartition``)."""
    pieces: list[OffsetRange] = []
    remaining = offset_range.size
    start = offset_range.start
    for part in range(parts):
        this_part = remaining // (parts - part)
        remaining -= this_part
        end = min(start + this_part, offset_range.end)
        if end > start:
            pieces.append(
                OffsetRange(
                    topic=offset_range.topic, partition=offset_range.partition, start=start, end=end
                )
            )
        start = end
    return pieces


def split_ranges(
    ranges: Iterable[OffsetRange],
    *,
    min_partitions: int | None,
    max_records_per_partition: int | None,
) -> list[OffsetRange]:
    """Non-empty ranges, split as Spark's ``KafkaOffsetRangeCalculator.getRanges`` does.

    Without options: one range per partition. ``maxRecordsPerPartition`` first cuts every
    range into pieces of at most that many offsets; then, while there are fewer ranges than
    ``minPartitions``, each is cut into ``round(size / (total / minPartitions))`` pieces (at
    least one), so big partitions are split and small ones are not.
    """
    kept = [r for r in ranges if r.size > 0]
    if max_records_per_partition is not None:
        kept = [
            piece for r in kept for piece in _divide(r, -(-r.size // max_records_per_partition))
        ]
    if min_partitions is None or len(kept) >= min_partitions:
        return kept
    ideal = sum(r.size for r in kept) / min_partitions
    # Java's Math.round: half up.
    return [piece for r in kept for piece in _divide(r, max(int(r.size / ideal + 0.5), 1))]


SMALL_BATCH_RECORDS = 10_000
"""A micro-batch of at most this many records in all is read in at most
:data:`SMALL_BATCH_TASKS` tasks (:func:`pack_ranges`)."""
SMALL_BATCH_TASKS = 2
"""The tasks of a small micro-batch: a task costs Spark and its Python worker tens of
milliseconds whatever it reads, so a few hundred records of 4 partitions on 2 cores took two
waves of tasks, each mostly that cost (BENCHMARKS.md)."""


def pack_ranges(ranges: list[OffsetRange]) -> list[tuple[OffsetRange, ...]]:
    """The ranges of one read as the tasks that read them: one range a task, but when they
    hold at most :data:`SMALL_BATCH_RECORDS` records in all, at most
    :data:`SMALL_BATCH_TASKS` tasks, each range whole in one of them, the largest first to
    the task with the fewest records (each task's ranges in their order here)."""
    if len(ranges) <= SMALL_BATCH_TASKS or sum(r.size for r in ranges) > SMALL_BATCH_RECORDS:
        return [(r,) for r in ranges]
    tasks: list[list[int]] = [[] for _ in range(SMALL_BATCH_TASKS)]
    sizes = [0] * SMALL_BATCH_TASKS
    for i in sorted(range(len(ranges)), key=lambda i: -ranges[i].size):
        lightest = sizes.index(min(sizes))
        tasks[lightest].append(i)
        sizes[lightest] += ranges[i].size
    return [tuple(ranges[i] for i in sorted(task)) for task in tasks]
