"""One partition's log: a sequence of LogSegments in one directory.

On disk, ``DATA_DIR/TOPIC-PARTITION/``: ``<base offset:020d>.log`` / ``.index`` /
``.timeindex`` / ``.txnindex`` per segment (see :mod:`riverbed.log.segment`),
``<offset:020d>.snapshot`` producer-state snapshots (:mod:`riverbed.log.producer_state`),
and the ``recovery-point``, ``log-start-offset`` and ``clean-shutdown`` files
(:mod:`riverbed.log.loader`).

Removing data is decided elsewhere and done here, under the lock: retention and DeleteRecords
(:mod:`riverbed.log.retention`) move the log start offset up with :meth:`Log.advance_log_start`,
which persists it before any segment is deleted; the cleaner replaces segments through
:meth:`Log.replace_segments` (:mod:`riverbed.log.swap`). The files of removed segments wait
in :attr:`Log.deleted_files` (:mod:`riverbed.log.deleted_files`).

Transactions: :meth:`Log.append_marker` completes them (an abort is also indexed, see
:mod:`riverbed.log.txn_index`); read_committed fetches read below
:attr:`Log.last_stable_offset` and skip :meth:`Log.aborted_transactions`.

Durability: :meth:`Log.append` writes without fsync (enough for acks=1: the batch is in the
page cache and survives a process crash); :meth:`Log.flush` fsyncs, after which everything
below :attr:`Log.flushed_offset` survives a machine crash (acks=all). The broker should call
flush periodically even without acks=all producers: the recovery point only moves, and
rolled segments are only fsynced, in flush.

After a crash, open recovers the tail (everything from the recovery point, normally the
active segment): the first torn or corrupt batch and all after it are cut off, indexes are
rebuilt, producer state is replayed from a snapshot; appends then continue with dense
offsets after the last valid batch. Every flushed batch is still there.

Threads: all methods run on one thread (the broker's event loop) except :meth:`flush`, which
may run concurrently in a worker thread. ``_lock`` guards what flush reads (the active
segment's fd, the end offset, the list of rolled segments still to fsync); flush fsyncs
``dup``\\ s of the file descriptors outside the lock, so appends never wait for a disk sync.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from riverbed.log.batch import (
    HEADER_SIZE,
    BatchHeader,
    TimestampType,
    parse_header,
    patch_base_offset,
    patch_log_append_time,
    validate_batch,
)
from riverbed.log.deleted_files import DeletedFiles, rename_to_deleted
from riverbed.log.errors import InvalidRecordError, OffsetOutOfRangeError, RecordTooLargeError
from riverbed.log.file_records import FileRecords
from riverbed.log.index import INT32_MAX, fsync_path, write_atomically
from riverbed.log.loader import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_FILE,
    LoadedLog,
    load_segments,
    write_offset_file,
    write_recovery_point,
)
from riverbed.log.producer_state import CompletedTxn, trim_snapshots
from riverbed.log.record_codec import ABORT, COMMIT, build_control_batch, decode_records
from riverbed.log.segment import LogSegment, scan_batches
from riverbed.log.swap import commit_swap, complete_swap
from riverbed.log.topic_config import TopicConfig
from riverbed.log.txn_index import AbortedTxn, collect_aborted


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendResult:
    """Where an appended (or duplicate) batch is in the log."""

    base_offset: int
    last_offset: int
    log_append_time_ms: int
    """The broker time stamped into a LogAppendTime batch; -1 for CreateTime topics."""
    log_start_offset: int
    duplicate: bool


@dataclass(slots=True, kw_only=True)
class _RolledSegment:
    """A segment that stopped being active and is not yet fsynced (done by flush)."""

    fd: int  # a dup, owned by this record
    files: list[Path]
    recovery_point: int


class Log:
    """A partition's log (on-disk layout and crash behaviour in the module docstring)."""

    def __init__(
        self, directory: Path, *, config: TopicConfig, clock: Callable[[], int], loaded: LoadedLog
    ) -> None:
        """A log over what :func:`~riverbed.log.loader.load_segments` found; use :meth:`open`."""
        self.directory = directory
        self.config = config
        self._clock = clock
        self._segments = loaded.segments
        self._bases = [s.base_offset for s in loaded.segments]
        self._producers = loaded.producers
        active = loaded.segments[-1]
        assert active.next_offset is not None
        self._log_end_offset = active.next_offset
        self._flushed_offset = self._log_end_offset  # everything found on disk was fsynced
        self._recovery_point = loaded.recovery_point
        self._log_start_offset = loaded.log_start_offset
        self.deleted_files = DeletedFiles()
        """Files of removed segments waiting for file.delete.delay.ms."""
        self._rolled: list[_RolledSegment] = []
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._closed = False

    @classmethod
    def open(cls, directory: Path, *, config: TopicConfig, clock: Callable[[], int]) -> Log:
        """Create the log in ``directory``, or open and (after a crash) recover it."""
        loaded = load_segments(directory, config=config, now_ms=clock())
        marker = directory / CLEAN_SHUTDOWN_FILE
        if marker.exists():
            marker.unlink()
            fsync_path(directory)
        return cls(directory, config=config, clock=clock, loaded=loaded)

    # --- offsets ----------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        """The first offset that can be read; only moves up."""
        return self._log_start_offset

    @property
    def recovery_point(self) -> int:
        """Every segment below this offset is fsynced, with its indexes."""
        return self._recovery_point

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        """== log_end_offset: a single replica is its own ISR."""
        return self._log_end_offset

    @property
    def flushed_offset(self) -> int:
        """Every offset below this is on stable storage."""
        return self._flushed_offset

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    def producer_epoch(self, producer_id: int) -> int | None:
        """The current epoch of an idempotent producer here, None if unknown."""
        return self._producers.epoch(producer_id)

    # --- transactions -----------------------------------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest ongoing transaction, or high_watermark if none is
        open: read_committed fetches read below it. Cheap: every fetch asks."""
        first_unstable = self._producers.first_unstable_offset()
        if first_unstable is None:
            return self.high_watermark
        return max(first_unstable, self._log_start_offset)  # DeleteRecords may pass it

    def ongoing_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its ongoing transaction (a copy)."""
        return self._producers.ongoing_transactions()

    def has_ongoing_transaction(self, producer_id: int) -> bool:
        return self._producers.has_ongoing_transaction(producer_id)

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions with ``last_offset >= start_offset`` and ``first_offset <
        upper_bound_offset`` by first offset, from the txn indexes of the segment holding
        ``start_offset`` on (an abort is indexed where its marker is). Called on every
        read_committed fetch: indexes are read once and cached (see collect_aborted)."""
        i = max(bisect.bisect_right(self._bases, start_offset) - 1, 0)
        return collect_aborted(
            (segment.txn_index for segment in self._segments[i:]),
            start_offset=start_offset,
            upper_bound_offset=upper_bound_offset,
        )

    def append_marker(
        self,
        *,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int = 0,
        timestamp_ms: int | None = None,
    ) -> AppendResult:
        """Write a COMMIT or ABORT marker for ``producer_id`` (Kafka's WriteTxnMarkers):
        one control batch stamped with ``timestamp_ms`` (default: the log's clock), appended
        like any batch. It completes the producer's ongoing transaction, if any; an aborted
        one is added to the txn index of the segment the marker went to.

        InvalidProducerEpochError if ``producer_epoch`` is older than the producer's."""
        self._producers.check_marker(producer_id=producer_id, producer_epoch=producer_epoch)
        marker = build_control_batch(
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            control_type=COMMIT if commit else ABORT,
            coordinator_epoch=coordinator_epoch,
            timestamp_ms=self._clock() if timestamp_ms is None else timestamp_ms,
        )
        result, completed = self._write(memoryview(marker), parse_header(marker))
        if completed is not None and not commit:
            self._segments[-1].txn_index.append(self._producers.aborted(completed))
        return result

    # --- append -----------------------------------------------------------------------------

    def append(self, batch: bytes | bytearray | memoryview) -> AppendResult:
        """Append exactly one magic-v2 batch as produced; see the module docstring.

        Validates (header, CRC-32C, size <= max_message_bytes; no control batch: those
        come from :meth:`append_marker`; in a compacted log every record has a key: only
        then are the records decoded), checks idempotence and transaction state, assigns
        offsets by patching base_offset (and, for LogAppendTime, the timestamp + CRC), then
        writes header and records with one pwritev, without copying the records.
        """
        view = memoryview(batch).cast("B") if not isinstance(batch, bytes) else memoryview(batch)
        header = validate_batch(view)
        if header.size > self.config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {header.size} bytes exceeds max.message.bytes "
                f"{self.config.max_message_bytes}"
            )
        if header.is_control:
            raise InvalidRecordError("control batches are written by the broker, not produced")
        if self.config.compacted and any(r.key is None for r in decode_records(view)):
            # Kafka's LogValidator: the cleaner could not keep such a record.
            raise InvalidRecordError("a compacted topic cannot accept a record without a key")
        original = self._producers.check(header)
        if original is not None:
            log_append_time = self.config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
            return AppendResult(
                base_offset=original.first_offset,
                last_offset=original.last_offset,
                log_append_time_ms=original.timestamp_ms if log_append_time else -1,
                log_start_offset=self.log_start_offset,
                duplicate=True,
            )
        return self._write(view, header)[0]

    def _write(
        self, view: memoryview, header: BatchHeader
    ) -> tuple[AppendResult, CompletedTxn | None]:
        """Assign offsets to a validated batch, write and index it, update producer state;
        for a marker, also the transaction it completed."""
        log_append_time = self.config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
        now_ms = self._clock()
        self._maybe_roll(
            size=header.size, last_offset_delta=header.last_offset_delta, now_ms=now_ms
        )
        base_offset = self._log_end_offset
        head = bytearray(view[:HEADER_SIZE])
        records = view[HEADER_SIZE:]
        patch_base_offset(head, base_offset)
        max_timestamp = header.max_timestamp
        if log_append_time:
            patch_log_append_time(head, records, timestamp_ms=now_ms)
            max_timestamp = now_ms
        active = self._segments[-1]
        position = active.write([head, records])
        active.track(
            position,
            base_offset=base_offset,
            max_timestamp=max_timestamp,
            size=header.size,
            index_interval_bytes=self.config.index_interval_bytes,
        )
        last_offset = base_offset + header.last_offset_delta
        active.next_offset = last_offset + 1
        self._log_end_offset = last_offset + 1
        completed = None
        if header.producer_id >= 0:
            stored = dataclasses.replace(
                header, base_offset=base_offset, max_timestamp=max_timestamp
            )
            completed = self._producers.update(stored)
        return AppendResult(
            base_offset=base_offset,
            last_offset=last_offset,
            log_append_time_ms=now_ms if log_append_time else -1,
            log_start_offset=self.log_start_offset,
            duplicate=False,
        ), completed

    def _maybe_roll(self, *, size: int, last_offset_delta: int, now_ms: int) -> None:
        """Kafka's LogSegment.shouldRoll: full by bytes, by age, index full, or offsets no
        longer fitting the index's int32 relative offsets."""
        active = self._segments[-1]
        if active.size == 0:
            active.created_ms = now_ms
            return
        config = self.config
        if (
            active.size + size > config.segment_bytes
            or now_ms - active.created_ms > config.segment_ms
            or active.offset_index.size_bytes + 8 > config.segment_index_bytes
            or active.time_index.size_bytes + 12 > config.segment_index_bytes
            or self._log_end_offset + last_offset_delta - active.base_offset > INT32_MAX
        ):
            self.roll(now_ms=now_ms)

    def roll(self, *, now_ms: int | None = None) -> None:
        """Start a new active segment at log_end_offset (the old one is fsynced by flush)."""
        old = self._segments[-1]
        if old.size == 0:
            return
        end = self._log_end_offset
        old.write_indexes()
        snapshot = self._producers.write_snapshot(self.directory, offset=end)
        new = LogSegment.create(
            self.directory, base_offset=end, now_ms=self._clock() if now_ms is None else now_ms
        )
        files = [old.index_path, old.time_index_path, snapshot]
        if old.txn_index_path.exists():  # only a segment that holds an abort has one
            files.append(old.txn_index_path)
        with self._lock:
            self._rolled.append(_RolledSegment(fd=os.dup(old.fd), files=files, recovery_point=end))
            self._segments.append(new)
            self._bases.append(end)

    # --- read -------------------------------------------------------------------------------

    def read(self, offset: int, *, max_bytes: int, max_offset: int | None = None) -> bytes:
        """Whole batches from the one holding ``offset``: at most ``max_bytes``, except that
        the first batch is returned whole even if larger (Kafka's progress rule); none at or
        after ``max_offset`` (default: high_watermark). b"" at log_end_offset."""
        with self.read_records(offset, max_bytes=max_bytes, max_offset=max_offset) as records:
            return records.read()

    def read_records(
        self, offset: int, *, max_bytes: int, max_offset: int | None = None
    ) -> FileRecords:
        """The batches :meth:`read` would return, as regions of the segment files (for
        zero-copy sends); the caller closes them."""
        if offset < self.log_start_offset or offset > self._log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {self._log_end_offset}]"
            )
        limit = self.high_watermark if max_offset is None else max_offset
        if offset >= limit:
            return FileRecords()
        i = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        position = self._segments[i].position_of(offset)
        while position is None and i + 1 < len(self._segments):
            i += 1  # ``offset`` was compacted away at the end of a cleaned segment
            position = self._segments[i].position_of(offset)
        parts: list[tuple[int, int, int]] = []
        remaining = max_bytes
        while position is not None:
            segment = self._segments[i]
            last = i == len(self._segments) - 1
            length, reached_end = segment.locate(
                position,
                max_bytes=remaining,
                max_offset=limit if last or limit < self._bases[i + 1] else None,
                first=not parts,
            )
            parts.append((segment.fd, position, length))
            remaining -= length
            i += 1
            if not reached_end or remaining <= 0 or i == len(self._segments):
                break
            position = 0
        return FileRecords.of(parts)

    # --- timestamps -------------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp_ms``
        (ListOffsets by time); None if there is none."""
        for segment in self._segments:
            if segment.largest_timestamp < timestamp_ms:
                continue
            position = segment.position_of(segment.time_index.lookup(timestamp_ms))
            if position is None:
                continue
            batches = scan_batches(segment.fd, start=position, end=segment.size, check_crc=False)
            for pos, header in batches:
                if header.max_timestamp < timestamp_ms:
                    continue
                for record in decode_records(segment.read_batch(pos)):
                    if record.timestamp >= timestamp_ms and record.offset >= self.log_start_offset:
                        return record.offset, record.timestamp
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3)."""
        best: LogSegment | None = None
        for segment in self._segments:
            if segment.size and (best is None or segment.largest_timestamp > best.max_timestamp):
                best = segment
        if best is None:
            return None
        position = best.position_of(best.offset_of_max_timestamp)
        if position is None:
            return None
        for record in decode_records(best.read_batch(position)):
            if record.timestamp == best.max_timestamp:
                return record.offset, record.timestamp
        return None

    # --- removing segments (what and when: riverbed.log.retention, riverbed.log.cleaner) ---

    def advance_log_start(self, offset: int) -> None:
        """Make ``offset`` the log start offset, durably, then take the segments wholly below
        it out of the log (never the active one) and rename their files ``*.deleted``.

        Its callers, retention and DeleteRecords (:mod:`riverbed.log.retention`), never move
        the start down; the file is written first, so a crash leaves it for the loader."""
        write_offset_file(self.directory / LOG_START_OFFSET_FILE, offset)
        self._log_start_offset = offset
        below = zip(self._segments[:-1], self._bases[1:], strict=True)
        doomed = [segment for segment, end in below if end <= offset]  # the oldest ones
        if not doomed:
            return
        self._splice(0, len(doomed), [])
        for segment in doomed:
            segment.close()  # in-flight fetches hold their own descriptors
        self._delete_later(rename_to_deleted(p for s in doomed for p in s.paths))

    def replace_segments(self, old: list[LogSegment], *, txn_index: bool) -> bool:
        """Swap in the cleaned segment the cleaner wrote beside ``old`` (consecutive, not
        the active one), crash-safely (:mod:`riverbed.log.swap`). False, changing nothing,
        if the log changed meanwhile (closed, or retention took one of them)."""
        with self._lock:
            try:
                first = next(i for i, s in enumerate(self._segments) if s is old[0])
            except StopIteration:
                return False
            current = self._segments[first : first + len(old)]
            if self._closed or current != old or first + len(old) >= len(self._segments):
                return False
        base = old[0].base_offset
        commit_swap(
            self.directory,
            base_offset=base,
            replaces=[s.base_offset for s in old],
            txn_index=txn_index,
        )
        for segment in old:
            segment.close()  # in-flight fetches hold their own descriptors
        self._delete_later(complete_swap(self.directory))
        cleaned = LogSegment(self.directory, base_offset=base, created_ms=old[0].created_ms)
        self._splice(first, len(old), [cleaned])
        return True

    def _splice(self, first: int, count: int, replacement: list[LogSegment]) -> None:
        """Put ``replacement`` in place of ``count`` segments from index ``first`` (never the
        active one), under the lock: flush reads the list from its thread."""
        with self._lock:
            self._segments[first : first + count] = replacement
            self._bases = [s.base_offset for s in self._segments]

    def _delete_later(self, paths: list[Path]) -> None:
        """Hand ``paths`` (already renamed ``*.deleted``) to :attr:`deleted_files`."""
        now_ms = self._clock()
        self.deleted_files.add(paths, now_ms=now_ms, delay_ms=self.config.file_delete_delay_ms)

    # --- durability -------------------------------------------------------------------------

    def flush(self) -> int:
        """fsync everything appended so far; returns the new flushed_offset.

        Safe to call from a worker thread while append() runs on the event loop: under the
        lock it takes a dup of the active segment's fd, the end offset and the rolled
        segments; the fsyncs happen outside it. Flushes are serialised among themselves."""
        with self._flush_lock:
            with self._lock:
                if self._closed:  # closed or deleted meanwhile: nothing left to sync
                    return self._flushed_offset
                end = self._log_end_offset
                active_fd = os.dup(self._segments[-1].fd)
                rolled, self._rolled = self._rolled, []
            try:
                for segment in rolled:
                    os.fsync(segment.fd)
                    for path in segment.files:
                        with contextlib.suppress(FileNotFoundError):  # retention took it
                            fsync_path(path)
                os.fsync(active_fd)
                if rolled:
                    fsync_path(self.directory)  # the new segment files' directory entries
                    self._recovery_point = rolled[-1].recovery_point
                    write_recovery_point(self.directory, self._recovery_point)
            finally:
                os.close(active_fd)
                for segment in rolled:
                    os.close(segment.fd)
            self._flushed_offset = max(self._flushed_offset, end)
            if rolled:
                trim_snapshots(self.directory, recovery_point=self._recovery_point)
            return self._flushed_offset

    def close(self) -> None:
        """Flush, persist indexes + a producer snapshot, then mark the shutdown clean."""
        if self._closed:
            return
        self.flush()
        active = self._segments[-1]
        active.write_indexes()
        snapshot = self._producers.write_snapshot(self.directory, offset=self._log_end_offset)
        for path in (active.index_path, active.time_index_path, snapshot):
            fsync_path(path)
        active.txn_index.fsync()
        write_recovery_point(self.directory, active.base_offset)
        write_atomically(self.directory / CLEAN_SHUTDOWN_FILE, b"")
        self.deleted_files.delete_expired(now_ms=2**63 - 1)
        with self._lock:
            self._closed = True
            for segment in self._segments:
                segment.close()

    def delete(self) -> None:
        """Close the files and remove the directory (no flush)."""
        self.delete_files_later()
        shutil.rmtree(self.directory, ignore_errors=True)

    def delete_files_later(self) -> None:
        """Close every file without flushing, leaving the directory for the caller to
        rename and remove (LogManager.delete_topic)."""
        with self._flush_lock, self._lock:
            self._closed = True
            for rolled in self._rolled:
                os.close(rolled.fd)
            self._rolled = []
            for segment in self._segments:
                segment.close()
