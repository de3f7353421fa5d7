"""Opening a partition directory: list segments, recover the tail, rebuild producer state.

Files beside the segments (all in the partition directory):

- ``clean-shutdown``: written (and fsynced) last by ``Log.close``; removed on open before
  anything is appended. Present means every file is complete: only the last segment's tail
  after its last index entry is checked, nothing is recovered.
- ``recovery-point``: ``"0\\n<offset>\\n"`` (version, offset), written by rename + fsync
  after every segment below ``offset`` and its indexes and producer snapshot are fsynced
  (by ``Log.flush`` after a roll, and after recovery).
- ``log-start-offset``: the same format; the log start offset once it is past the first
  segment's base (DeleteRecords, retention). Written (fsynced) before any segment is deleted,
  so after a crash the segments wholly below it are deleted here, and reads below it are
  refused either way. Kafka keeps one ``log-start-offset-checkpoint`` per data directory;
  one file per partition needs no coordination between partitions.
- ``*.deleted``: segment files retention or the cleaner removed, waiting for
  ``file.delete.delay.ms``; removed here. ``cleaner-swap`` and ``*.cleaned``: a cleaning
  in progress (see :mod:`riverbed.log.swap`); it is completed or discarded here first.

Recovery after a crash is Kafka's ``LogLoader``: one linear scan of the segments from the
recovery point on (usually just the active one) validating each batch (header, CRC-32C,
offsets dense: the cleaner only rewrites segments below the recovery point, so the tail
has no compaction gaps; without a readable recovery point the scan starts at the first
segment and only requires offsets to grow, as Kafka does), stopping at the first bad or torn
one, truncating there and deleting any later segments; their indexes are rebuilt on the
way. Segments below the recovery point are only listed, so
start-up time depends on the size of the tail, not of the log.

Producer state comes from the newest snapshot at or below the recovery point plus the batch
headers after it (headers only, no CRC: those segments were already fsynced and recovered).
Markers complete transactions as they are replayed. Every segment the scan covers has its
``.txnindex`` emptied and rebuilt from its ABORT markers (each marker's type is read from
its record), with the LSO the replay has reached, so an index entry lost or torn by a crash
after its marker was written comes back, and one whose marker was cut off goes. Segments
below the scan keep their txn indexes: they were fsynced with the segment.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from riverbed.log.batch import BatchHeader
from riverbed.log.deleted_files import DELETED_SUFFIX
from riverbed.log.index import fsync_path, write_atomically
from riverbed.log.producer_state import (
    ProducerStateManager,
    delete_snapshots,
    load_latest_snapshot,
)
from riverbed.log.record_codec import ABORT, control_type
from riverbed.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    scan_batches,
)
from riverbed.log.swap import CLEANED_SUFFIX, complete_swap
from riverbed.log.topic_config import TopicConfig
from riverbed.log.txn_index import TXN_INDEX_SUFFIX

CLEAN_SHUTDOWN_FILE = "clean-shutdown"
RECOVERY_POINT_FILE = "recovery-point"
LOG_START_OFFSET_FILE = "log-start-offset"


@dataclass(slots=True, kw_only=True)
class LoadedLog:
    """What :func:`load_segments` found."""

    segments: list[LogSegment]
    producers: ProducerStateManager
    recovery_point: int
    recovered_from: int | None
    """Offset the recovery scan started at; None after a clean shutdown."""
    truncated_bytes: int
    log_start_offset: int


def write_offset_file(path: Path, offset: int) -> None:
    """``"0\\n<offset>\\n"`` (version 0), atomically and durably."""
    write_atomically(path, f"0\n{offset}\n".encode())


def read_offset_file(path: Path) -> int | None:
    """The offset in a file written by :func:`write_offset_file`; None if it is missing or
    unreadable (the callers then fall back to what the segments say)."""
    try:
        lines = path.read_text().split("\n")
        if lines[0] == "0" and lines[1].isdigit():
            return int(lines[1])
    except (OSError, IndexError, UnicodeDecodeError):
        pass
    return None


def write_recovery_point(directory: Path, offset: int) -> None:
    write_offset_file(directory / RECOVERY_POINT_FILE, offset)


def _list_bases(directory: Path) -> list[int]:
    bases = []
    for entry in os.scandir(directory):
        name = entry.name
        stem, _, suffix = name.partition(".")
        if name.endswith((".tmp", DELETED_SUFFIX, CLEANED_SUFFIX)):
            os.unlink(entry.path)
        elif "." + suffix == LOG_SUFFIX and stem.isdigit():
            bases.append(int(stem))
    known = {f"{b:020d}" for b in bases}
    for entry in os.scandir(directory):  # indexes whose .log is gone
        stem, _, suffix = entry.name.partition(".")
        stale = "." + suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
        if stale and stem not in known:
            os.unlink(entry.path)
    return sorted(bases)


def load_segments(directory: Path, *, config: TopicConfig, now_ms: int) -> LoadedLog:
    """Open or create the log in ``directory`` (see the module docstring)."""
    directory.mkdir(parents=True, exist_ok=True)
    complete_swap(directory)
    bases = _list_bases(directory)
    if not bases:
        segment = LogSegment.create(directory, base_offset=0, now_ms=now_ms)
        fsync_path(directory)
        return LoadedLog(
            segments=[segment],
            producers=ProducerStateManager(),
            recovery_point=0,
            recovered_from=None,
            truncated_bytes=0,
            log_start_offset=0,
        )
    log_start = read_offset_file(directory / LOG_START_OFFSET_FILE)
    if log_start is not None:  # a crash between moving the start and deleting segments
        while len(bases) > 1 and bases[1] <= log_start:
            LogSegment(directory, base_offset=bases.pop(0), created_ms=now_ms).delete()
    segments = [LogSegment(directory, base_offset=b, created_ms=now_ms) for b in bases]
    if (directory / CLEAN_SHUTDOWN_FILE).exists():
        loaded = _load_clean(directory, segments, config=config)
        if loaded is None:
            segments[-1] = LogSegment(directory, base_offset=bases[-1], created_ms=now_ms)
    else:
        loaded = None
    if loaded is None:
        loaded = _recover(directory, segments, config=config)
    loaded.log_start_offset = max(bases[0], log_start or 0)
    return loaded


def _load_clean(
    directory: Path, segments: list[LogSegment], *, config: TopicConfig
) -> LoadedLog | None:
    active = segments[-1]
    if not active.load_active_tail(index_interval_bytes=config.index_interval_bytes):
        return None
    assert active.next_offset is not None
    snapshot = load_latest_snapshot(directory, at_most=active.next_offset)
    if snapshot is None or snapshot[0] != active.next_offset:
        active.close()
        return None
    return LoadedLog(
        segments=segments,
        producers=snapshot[1],
        recovery_point=active.base_offset,
        recovered_from=None,
        truncated_bytes=0,
        log_start_offset=0,
    )


def _recover(directory: Path, segments: list[LogSegment], *, config: TopicConfig) -> LoadedLog:
    bases = [s.base_offset for s in segments]
    checkpoint = read_offset_file(directory / RECOVERY_POINT_FILE)
    first = 0 if checkpoint is None else max(bisect.bisect_right(bases, checkpoint) - 1, 0)
    start = bases[first]

    snapshot = load_latest_snapshot(directory, at_most=start)
    delete_snapshots(directory, above=start)
    producers = ProducerStateManager() if snapshot is None else snapshot[1]
    replay_from = bases[0] if snapshot is None else snapshot[0]
    for i, segment in enumerate(segments[:first]):  # headers from the snapshot to `start`
        if bases[i + 1] <= replay_from:
            continue
        for _, header in scan_batches(segment.fd, start=0, end=segment.size, check_crc=False):
            if header.base_offset >= replay_from:
                producers.update(header)

    truncated = 0
    kept = first
    for i in range(first, len(segments)):
        segment = segments[i]
        # Compaction gaps can only be in segments below the recovery point, scanned when the
        # recovery point is unreadable; the active segment is never compacted.
        dense = checkpoint is not None or i == len(segments) - 1
        if i > first:
            previous_end = segments[i - 1].next_offset
            assert previous_end is not None
            if previous_end > segment.base_offset or (dense and previous_end < segment.base_offset):
                break  # the rest is not a continuation of the log
            producers.write_snapshot(directory, offset=segment.base_offset)
        size = segment.size
        segment.txn_index.reset()
        valid_end = segment.rebuild_indexes(
            index_interval_bytes=config.index_interval_bytes,
            on_batch=_replayer(segment, producers),
            check_crc=True,
            dense=dense,
        )
        kept = i
        if valid_end < size:
            segment.truncate(valid_end)
            truncated += size - valid_end
            break
    for segment in segments[kept + 1 :]:
        truncated += segment.size
        segment.delete()
    segments = segments[: kept + 1]

    for segment in segments[first:]:  # make the recovered tail durable before trusting it
        os.fsync(segment.fd)
        if segment is not segments[-1]:
            segment.write_indexes()
            fsync_path(segment.index_path)
            fsync_path(segment.time_index_path)
            segment.txn_index.fsync()
    for path in directory.glob("*.snapshot"):
        fsync_path(path)
    fsync_path(directory)
    write_recovery_point(directory, segments[-1].base_offset)
    return LoadedLog(
        segments=segments,
        producers=producers,
        recovery_point=segments[-1].base_offset,
        recovered_from=start,
        truncated_bytes=truncated,
        log_start_offset=0,
    )


def _replayer(
    segment: LogSegment, producers: ProducerStateManager
) -> Callable[[int, BatchHeader], None]:
    """The on_batch of a recovery scan: replay producer state, index the aborts."""

    def replay(position: int, header: BatchHeader) -> None:
        completed = producers.update(header)
        if completed is not None and control_type(segment.read_batch(position)) == ABORT:
            segment.txn_index.append(producers.aborted(completed))

    return replay
