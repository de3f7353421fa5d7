"""Opening a partition directory: list segments, recover the tail, rebuild producer state.

Files beside the segments (all in the partition directory):

- ``clean-shutdown``: written (and fsynced) last by ``Log.close``; removed on open before
  anything is appended. Present means every file is complete: only the last segment's tail
  after its last index entry is checked, nothing is recovered.
- ``recovery-point``: ``"0\\n<offset>\\n"`` (version, offset), written by rename + fsync
  after every segment below ``offset`` and its indexes and producer snapshot are fsynced
  (by ``Log.flush`` after a roll, and after recovery).

Recovery after a crash is Kafka's ``LogLoader``: one linear scan of the segments from the
recovery point on (usually just the active one) validating each batch (header, CRC-32C,
offsets dense), stopping at the first bad or torn one, truncating there and deleting any
later segments; their indexes are rebuilt on the way. Without a readable recovery point the
scan starts at the first segment. Segments below the recovery point are only listed, so
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
from riverbed.log.config import LogConfig
from riverbed.log.index import fsync_path
from riverbed.log.producer_state import (
    ProducerStateManager,
    delete_snapshots,
    load_latest_snapshot,
)
from riverbed.log.records import ABORT, control_type
from riverbed.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    scan_batches,
)
from riverbed.log.txn_index import TXN_INDEX_SUFFIX

CLEAN_SHUTDOWN_FILE = "clean-shutdown"
RECOVERY_POINT_FILE = "recovery-point"


@dataclass(slots=True, kw_only=True)
class LoadedLog:
    """What :func:`load_segments` found."""

    segments: list[LogSegment]
    producers: ProducerStateManager
    recovery_point: int
    recovered_from: int | None
    """Offset the recovery scan started at; None after a clean shutdown."""
    truncated_bytes: int


def write_atomically(path: Path, data: bytes) -> None:
    """tmp + fsync + rename + directory fsync."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_path(path.parent)


def write_recovery_point(directory: Path, offset: int) -> None:
    write_atomically(directory / RECOVERY_POINT_FILE, f"0\n{offset}\n".encode())


def read_recovery_point(directory: Path) -> int | None:
    try:
        lines = (directory / RECOVERY_POINT_FILE).read_text().split("\n")
        if lines[0] == "0" and lines[1].isdigit():
            return int(lines[1])
    except (OSError, IndexError, UnicodeDecodeError):
        pass
    return None


def _list_bases(directory: Path) -> list[int]:
    bases = []
    for entry in os.scandir(directory):
        name = entry.name
        stem, _, suffix = name.partition(".")
        if name.endswith(".tmp"):
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


def load_segments(directory: Path, *, config: LogConfig, now_ms: int) -> LoadedLog:
    """Open or create the log in ``directory`` (see the module docstring)."""
    directory.mkdir(parents=True, exist_ok=True)
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
        )
    segments = [LogSegment(directory, base_offset=b, created_ms=now_ms) for b in bases]
    if (directory / CLEAN_SHUTDOWN_FILE).exists():
        loaded = _load_clean(directory, segments, config=config)
        if loaded is not None:
            return loaded
        segments[-1] = LogSegment(directory, base_offset=bases[-1], created_ms=now_ms)
    return _recover(directory, segments, config=config)


def _load_clean(
    directory: Path, segments: list[LogSegment], *, config: LogConfig
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
    )


def _recover(directory: Path, segments: list[LogSegment], *, config: LogConfig) -> LoadedLog:
    bases = [s.base_offset for s in segments]
    checkpoint = read_recovery_point(directory)
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
        if i > first:
            previous_end = segments[i - 1].next_offset
            if previous_end != segment.base_offset:
                break  # a gap: the rest is not a continuation of the log
            producers.write_snapshot(directory, offset=segment.base_offset)
        size = segment.size
        segment.txn_index.reset()
        valid_end = segment.rebuild_indexes(
            index_interval_bytes=config.index_interval_bytes,
            on_batch=_replayer(segment, producers),
            check_crc=True,
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
