"""The log cleaner: compaction of ``cleanup.policy=compact`` logs (Kafka's ``LogCleaner``).

A compacted log keeps at least the latest record of every key, so reading it from the start
rebuilds the whole table. Cleaning happens in three steps:

1. :func:`plan_cleaning` (on the log's thread; cheap): what can be cleaned and whether it is
   worth it. The *cleanable* part runs from the first segment up to the first uncleanable
   offset, the smallest of: the active segment's base; the last stable offset (an open
   transaction is never touched); the recovery point (only fsynced segments are rewritten,
   so the recovery scan of the tail never meets compaction gaps); the base of the first
   segment with a record younger than ``min.compaction.lag.ms``; rounded down to a segment
   boundary. From the cleaner checkpoint on it is *dirty*. A log is cleaned when
   dirty / cleanable bytes >= ``min.cleanable.dirty.ratio``, when a dirty segment is older
   than ``max.compaction.lag.ms``, or when kept tombstones or markers reached their delete
   horizon.
2. :func:`riverbed.log.compaction.clean` (anywhere; picklable in and out: the broker runs
   it in a child process so the event loop keeps its core): builds the offset map (key ->
   latest offset) over the dirty part, as much as ``log.cleaner.dedupe.buffer.size``
   holds, then rewrites every segment from the first up to the end of the map, merged into
   groups of at most ``segment.bytes``, as ``.cleaned`` files (:mod:`riverbed.log.swap`).
3. :func:`install` (on the log's thread): swaps each group in with
   :meth:`~riverbed.log.log.Log.replace_segments`, then writes the checkpoint.

What a cleaning keeps (Kafka's rules):

- a record whose key has a later offset in the map is removed, as is a record without a
  key (Kafka refuses those at produce; the cleaner drops them);
- the data of aborted transactions (from the txn indexes) is removed whole;
- offsets never change: a batch keeps its base offset, last offset delta, producer id,
  epoch and base sequence; only its records shrink. A batch left empty is removed. (Kafka
  keeps each producer's last batch, emptied, for its sequence numbers; riverbed's producer
  state lives in snapshots that do not need the batches.)
- a COMMIT marker is kept while any record of its transaction is;
- tombstones (null values) and markers of transactions with no data left stay until their
  *delete horizon*: the first cleaning that keeps one stamps its batch with now +
  ``delete.retention.ms`` (KIP-534: attribute bit 6, carried in base_timestamp, record
  timestamps unchanged); a cleaning after the horizon removes them. A consumer that reads
  from the start within ``delete.retention.ms`` of a delete being compacted sees it.

The checkpoint, ``cleaner-offset-checkpoint`` in the partition directory, is JSON
``{"version": 0, "first_dirty_offset": N, "delete_horizon_ms": H | null}``, written
atomically after the swaps. Missing or unreadable means "all dirty": one more cleaning,
nothing lost. A crash during a cleaning leaves the old segments or the cleaned ones (see
:mod:`riverbed.log.swap`); cleaning already-cleaned segments again changes nothing else.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from riverbed.log.batch import (
    HEADER_SIZE,
    NO_TIMESTAMP,
    parse_header,
)
from riverbed.log.index import write_atomically
from riverbed.log.log import Log
from riverbed.log.segment import LogSegment
from riverbed.log.swap import discard_cleaned
from riverbed.log.txn_index import AbortedTxn

CHECKPOINT_FILE = "cleaner-offset-checkpoint"


@dataclass(frozen=True, slots=True, kw_only=True)
class CleanerSettings:
    """The broker-wide cleaner settings (Kafka's ``log.cleaner.*``)."""

    dedupe_buffer_size: int = 134_217_728
    """log.cleaner.dedupe.buffer.size default: 128 MiB."""
    io_max_bytes_per_second: float = float("inf")
    """log.cleaner.io.max.bytes.per.second default: Double.MAX_VALUE (no throttle)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    first_dirty_offset: int
    delete_horizon_ms: int | None
    """When kept tombstones or markers may next be removed; None if there are none."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceSegment:
    base_offset: int
    end_offset: int
    """The next segment's base offset."""
    size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CleaningJob:
    """Everything :func:`clean` needs, by value (it may run in another process)."""

    directory: str
    segments: tuple[SourceSegment, ...]
    """The cleanable segments, oldest first."""
    first_dirty_offset: int
    aborted: tuple[AbortedTxn, ...]
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    index_interval_bytes: int
    map_budget_bytes: int
    io_max_bytes_per_second: float


@dataclass(frozen=True, slots=True, kw_only=True)
class CleanedGroup:
    replaces: tuple[int, ...]
    """Base offsets of the segments the cleaned one replaces."""
    txn_index: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class CleanerStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    seconds: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class CleaningResult:
    groups: tuple[CleanedGroup, ...]
    checkpoint: Checkpoint
    stats: CleanerStats


# --- checkpoint ------------------------------------------------------------------------------


def read_checkpoint(directory: Path) -> Checkpoint | None:
    try:
        document = json.loads((directory / CHECKPOINT_FILE).read_bytes())
        horizon = document["delete_horizon_ms"]
        return Checkpoint(
            first_dirty_offset=int(document["first_dirty_offset"]),
            delete_horizon_ms=None if horizon is None else int(horizon),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None  # all dirty: one more cleaning, nothing lost


def write_checkpoint(directory: Path, checkpoint: Checkpoint) -> None:
    document = {
        "version": 0,
        "first_dirty_offset": checkpoint.first_dirty_offset,
        "delete_horizon_ms": checkpoint.delete_horizon_ms,
    }
    write_atomically(directory / CHECKPOINT_FILE, json.dumps(document).encode())


# --- 1. planning (the log's thread) ---------------------------------------------------------


def plan_cleaning(log: Log, *, now_ms: int, settings: CleanerSettings) -> CleaningJob | None:
    """The cleaning ``log`` needs now, or None (see the module docstring)."""
    config = log.config
    if not config.compacted:
        return None
    cleanable = _cleanable(log, now_ms=now_ms)
    if not cleanable:
        return None
    segments = [segment for segment, _ in cleanable]
    checkpoint = read_checkpoint(log.directory)
    first_dirty = segments[0].base_offset
    if checkpoint is not None:
        first_dirty = max(first_dirty, checkpoint.first_dirty_offset)
    dirty = [s for s in segments if s.base_offset >= first_dirty]
    total_bytes = sum(s.size for s in segments)
    dirty_bytes = sum(s.size for s in dirty)
    horizon = None if checkpoint is None else checkpoint.delete_horizon_ms
    due = (
        (total_bytes and dirty_bytes / total_bytes >= config.min_cleanable_dirty_ratio)
        or any(now_ms - _first_timestamp(s) > config.max_compaction_lag_ms for s in dirty)
        or (horizon is not None and horizon <= now_ms)
    )
    if not due or (not dirty_bytes and horizon is None):
        return None
    return CleaningJob(
        directory=str(log.directory),
        segments=tuple(
            SourceSegment(base_offset=s.base_offset, end_offset=end, size=s.size)
            for s, end in cleanable
        ),
        first_dirty_offset=first_dirty,
        aborted=tuple(log.aborted_transactions(segments[0].base_offset, cleanable[-1][1])),
        now_ms=now_ms,
        delete_retention_ms=config.delete_retention_ms,
        segment_bytes=config.segment_bytes,
        index_interval_bytes=config.index_interval_bytes,
        map_budget_bytes=settings.dedupe_buffer_size,
        io_max_bytes_per_second=settings.io_max_bytes_per_second,
    )


def _first_timestamp(segment: LogSegment) -> int:
    """The first batch's max timestamp (what max.compaction.lag.ms is measured from, as in
    Kafka); the segment's creation time if it has none."""
    if segment.size < HEADER_SIZE:
        return segment.created_ms
    timestamp = parse_header(os.pread(segment.fd, HEADER_SIZE, 0)).max_timestamp
    return segment.created_ms if timestamp == NO_TIMESTAMP else timestamp


def _cleanable(log: Log, *, now_ms: int) -> list[tuple[LogSegment, int]]:
    """The segments wholly below the first uncleanable offset, each with where it ends (the
    next segment's base offset)."""
    segments = list(log.segments)
    limit = min(segments[-1].base_offset, log.last_stable_offset, log.recovery_point)
    lag_ms = log.config.min_compaction_lag_ms
    cleanable: list[tuple[LogSegment, int]] = []
    for segment, end in zip(segments, [s.base_offset for s in segments[1:]], strict=False):
        if end > limit:
            break
        if lag_ms and now_ms - segment.largest_timestamp < lag_ms:
            break  # a record younger than min.compaction.lag.ms
        cleanable.append((segment, end))
    return cleanable


# --- 3. installing (the log's thread) -------------------------------------------------------


def install(log: Log, result: CleaningResult) -> bool:
    """Swap in what :func:`clean` wrote and move the checkpoint; False (the cleaned files
    discarded, the checkpoint kept) if the log changed meanwhile in a way that forbids it."""
    swapped = True
    for group in result.groups:
        by_base = {s.base_offset: s for s in log.segments}
        old = [by_base.get(base) for base in group.replaces]
        if not swapped or any(s is None for s in old):
            discard_cleaned(log.directory, group.replaces[0])
            swapped = False
            continue
        if not log.replace_segments([s for s in old if s is not None], txn_index=group.txn_index):
            discard_cleaned(log.directory, group.replaces[0])
            swapped = False
    if swapped:
        write_checkpoint(log.directory, result.checkpoint)
    return swapped
