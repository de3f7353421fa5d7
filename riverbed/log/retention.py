"""Which old segments retention deletes (Kafka's ``UnifiedLog.deleteOldSegments``).

A pure function of the segments, the config and the clock; :meth:`Log.delete_old_segments`
applies it. Segments are considered from the oldest and the first one that must stay ends
the run, so the log start only moves forward and the log never gets a hole. A segment goes
when, in Kafka's order:

- it lies wholly below the log start offset (after DeleteRecords), whatever the policy;
- with ``cleanup.policy`` containing ``delete``: its largest record timestamp is more than
  ``retention.ms`` ago (-1: never), or the log is more than ``retention.bytes`` larger than
  allowed even without it (-1: no limit). A segment without timestamps counts its file's
  modification time, as Kafka does.

The active segment may go too (all of it has expired): the log rolls first, so the new log
start offset is the log end offset and the partition stays writable.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from riverbed.log.batch import NO_TIMESTAMP
from riverbed.log.segment import LogSegment
from riverbed.log.topic_config import TopicConfig


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
