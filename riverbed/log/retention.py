"""Removing data from the front of a log: retention and DeleteRecords.

Both only move the log start offset up, through :meth:`Log.advance_log_start
<riverbed.log.log.Log.advance_log_start>`: it writes the new start to the partition's
``log-start-offset`` file (atomically, fsynced) *before* any segment goes, then takes the
segments wholly below it out of the log and renames their files ``*.deleted``
(:mod:`riverbed.log.deleted_files` removes them ``file.delete.delay.ms`` later). After a crash
in between, the loader deletes the segments wholly below the persisted start
(:mod:`riverbed.log.loader`), and reads below it are refused either way.

- :func:`delete_records` is Kafka's DeleteRecords: the start moves to the offset asked for.
- :func:`delete_old_segments` is retention (Kafka's ``UnifiedLog.deleteOldSegments``), run
  by the broker every ``log.retention.check.interval.ms``. Segments are considered from the
  oldest and the first one that must stay ends the run, so the log start only moves forward
  and the log never gets a hole. A segment goes when, in Kafka's order:

  - it lies wholly below the log start offset (after DeleteRecords), whatever the policy;
  - with ``cleanup.policy`` containing ``delete``: its largest record timestamp is more than
    ``retention.ms`` ago (-1: never), or the log is more than ``retention.bytes`` larger
    than allowed even without it (-1: no limit). A segment without timestamps counts its
    file's modification time, as Kafka does.

  The active segment may go too (all of it has expired): the log rolls first, so the new
  log start offset is the log end offset and the partition stays writable.

Threads: the log's (the broker's event loop), like appends.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from riverbed.log.batch import NO_TIMESTAMP
from riverbed.log.errors import OffsetOutOfRangeError
from riverbed.log.log import Log
from riverbed.log.segment import LogSegment
from riverbed.log.topic_config import TopicConfig


def delete_records(log: Log, offset: int) -> int:
    """Kafka's DeleteRecords: move the log start offset of ``log`` up to ``offset`` (-1: the
    high watermark), durably, and delete the segments wholly below it; the new log start
    offset. OffsetOutOfRangeError past the high watermark (or below -1)."""
    if offset == -1:
        offset = log.high_watermark
    if not 0 <= offset <= log.high_watermark:
        raise OffsetOutOfRangeError(
            f"cannot delete records before {offset}: the high watermark is {log.high_watermark}"
        )
    if offset > log.log_start_offset:
        log.advance_log_start(offset)
    return log.log_start_offset


def delete_old_segments(log: Log, *, now_ms: int) -> int:
    """Retention: delete the oldest segments of ``log`` that its config and the log start
    offset allow (see the module docstring); how many were deleted."""
    segments = log.segments
    count = deletable_segments(
        segments,
        config=log.config,
        now_ms=now_ms,
        log_start_offset=log.log_start_offset,
        next_bases=[*(s.base_offset for s in segments[1:]), log.log_end_offset],
    )
    if count == len(segments):
        if segments[-1].size == 0:
            count -= 1  # an empty active segment is never deletable (Kafka's rule)
        else:
            log.roll(now_ms=now_ms)
    if count == 0:
        return 0
    log.advance_log_start(log.segments[count].base_offset)
    return count


def deletable_segments(
    segments: Sequence[LogSegment],
    *,
    config: TopicConfig,
    now_ms: int,
    log_start_offset: int,
    next_bases: Sequence[int],
) -> int:
    """How many of the oldest ``segments`` to delete (see the module docstring).
    ``next_bases[i]`` is where segment i ends: the next base offset, for the active
    segment the log end offset."""
    count = 0
    while count < len(segments) and next_bases[count] <= log_start_offset:
        count += 1
    if "delete" not in config.cleanup_policy.split(","):
        return count
    last = len(segments) - 1
    if segments[last].size == 0:
        last -= 1  # an empty active segment holds nothing to delete
    excess = -1
    if config.retention_bytes >= 0:
        excess = sum(s.size for s in segments) - config.retention_bytes
        excess -= sum(s.size for s in segments[:count])
    while count <= last:
        segment = segments[count]
        too_big = config.retention_bytes >= 0 and excess - segment.size >= 0
        too_old = config.retention_ms >= 0 and now_ms - _largest_timestamp(segment) > (
            config.retention_ms
        )
        if not (too_big or too_old):
            break
        excess -= segment.size
        count += 1
    return count


def _largest_timestamp(segment: LogSegment) -> int:
    largest = segment.largest_timestamp
    if largest != NO_TIMESTAMP:
        return largest
    return os.stat(segment.fd).st_mtime_ns // 1_000_000
