"""Admission control of the stream: how far one micro-batch may read.

Spark's Kafka source (``KafkaMicroBatchStream.latestOffset``) has two knobs, and so does
riverbed's:

- ``maxOffsetsPerTrigger``: at most this many offsets per batch, split across partitions in
  proportion to their backlog (:func:`rate_limit`, Spark's ``rateLimit``);
- ``minOffsetsPerTrigger`` with ``maxTriggerDelay``: wait until this many offsets are
  available, but no longer than the delay since the last batch (:class:`TriggerDelay`,
  Spark's ``delayBatch``).

A Python source gets only the built-in ``ReadLimit``s and no composite limit, so the minimum
is tracked here, in the driver's reader object, which lives as long as the query.
Pure logic: no client, and the clock is passed in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from riverbed.spark.source.offsets import OffsetMap, Partition

__all__ = ["TriggerDelay", "backlog", "rate_limit"]

MAX_OFFSET = (1 << 63) - 1
"""Java's Long.MaxValue: Spark guards ``begin + share`` against overflow with it (SPARK-26718)."""


def _sizes(start: Mapping[Partition, int], latest: Mapping[Partition, int]) -> dict[Partition, int]:
    """Positive backlogs; a partition missing from ``start`` is new and starts at 0."""
    sizes: dict[Partition, int] = {}
    for partition, end in latest.items():
        size = end - start.get(partition, 0)
        if size > 0:
            sizes[partition] = size
    return sizes


def backlog(start: Mapping[Partition, int], latest: Mapping[Partition, int]) -> int:
    """How many offsets lie between ``start`` and ``latest`` (new partitions from 0)."""
    return sum(_sizes(start, latest).values())


def rate_limit(
    max_offsets: int, start: Mapping[Partition, int], latest: Mapping[Partition, int]
) -> OffsetMap:
    """The end offsets of a batch of about ``max_offsets`` offsets.

    Each partition with a backlog gets ``max_offsets * backlog / total`` of it, rounded down,
    but a share under one is rounded up to one so that a small partition is never starved;
    the total may therefore exceed ``max_offsets`` by fewer than one offset per partition,
    exactly as in Spark. Partitions without a backlog (or whose end moved backwards, which
    planning reports as data loss) end at ``latest``.
    """
    sizes = _sizes(start, latest)
    total = sum(sizes.values())
    if total == 0:
        return dict(latest)
    end: OffsetMap = {}
    for partition, latest_offset in latest.items():
        size = sizes.get(partition)
        if size is None:
            end[partition] = latest_offset
            continue
        begin = start.get(partition, 0)
        share = max_offsets * size // total
        if max_offsets * size < total:  # prorate < 1: Math.ceil
            share = 1
        offset = MAX_OFFSET if share > MAX_OFFSET - begin else begin + share
        end[partition] = min(latest_offset, offset)
    return end


@dataclass(slots=True, kw_only=True)
class TriggerDelay:
    """``minOffsetsPerTrigger``/``maxTriggerDelay``: whether to hold back the next batch.

    The first batch of a reader is never held back (Spark starts its clock at 0 too), so a
    restarted query catches up at once.
    """

    min_offsets: int
    max_delay_ms: int
    last_trigger_ms: float | None = field(default=None)

    def hold_back(self, available: int, *, now_ms: float) -> bool:
        """True to skip this batch: fewer than ``min_offsets`` available and the delay since
        the last batch has not run out. Otherwise the batch runs and the clock restarts."""
        overdue = self.last_trigger_ms is None or now_ms - self.last_trigger_ms >= self.max_delay_ms
        if not overdue and available < self.min_offsets:
            return True
        self.last_trigger_ms = now_ms
        return False
