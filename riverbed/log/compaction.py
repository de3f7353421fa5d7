"""Step 2 of a cleaning (see :mod:`riverbed.log.cleaner` for the rules and the other steps):
the offset map and the rewriting of segments into ``.cleaned`` files.

Runs anywhere: its input and output are plain values (the broker runs it in a child
process, :mod:`riverbed.log.cleaner_process`), it reads the source segments by path (they
are immutable; if one vanished meanwhile, OSError), and it writes only ``.cleaned`` files.
Each source segment is read twice, in 8 MiB chunks: once to build the offset map over the
dirty part, once to rewrite. Records are decoded only as far as the cleaner needs (offset,
key, whether the value is null); kept records are copied as they are, except in a batch that
gets a delete horizon, whose timestamp deltas are rewritten.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from riverbed.log.batch import (
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    NO_TIMESTAMP,
    BatchHeader,
    TimestampType,
    encode_batch,
    parse_header,
)
from riverbed.log.cleaner import (
    Checkpoint,
    CleanedGroup,
    CleanerStats,
    CleaningJob,
    CleaningResult,
    SourceSegment,
)
from riverbed.log.compression import compress, decompress
from riverbed.log.index import fsync_path
from riverbed.log.record_codec import ABORT, control_type, read_varint, write_varint
from riverbed.log.segment import LogSegment
from riverbed.log.swap import cleaned_path
from riverbed.log.txn_index import AbortedTxn, TransactionIndex

READ_CHUNK_BYTES = 256 * 1024
"""Segments are read sequentially in chunks this large."""
MAP_ENTRY_OVERHEAD_BYTES = 100
"""What one offset-map entry costs Python besides its key (dict slot, bytes and int objects);
Kafka's map costs 24 bytes per key (an MD5 and an offset) in the same dedupe buffer."""


@dataclass(slots=True)
class _Throttle:
    """Sleeps so that bytes read + written stay under ``rate`` per second."""

    rate: float
    started: float = field(default_factory=time.monotonic)
    done: int = 0

    def account(self, size: int) -> None:
        self.done += size
        if self.rate == float("inf"):
            return
        ahead = self.done / self.rate - (time.monotonic() - self.started)
        if ahead > 0:
            time.sleep(ahead)


def clean(job: CleaningJob) -> CleaningResult:
    """Step 2 (see the module docstring). Raises OSError if a source segment vanished
    (deleted by retention meanwhile): nothing is installed then."""
    started = time.monotonic()
    directory = Path(job.directory)
    throttle = _Throttle(job.io_max_bytes_per_second)
    offset_map, map_end, mapped_bytes = _build_offset_map(job, directory, throttle)
    to_clean = [s for s in job.segments if s.end_offset <= map_end]
    state = _TxnState(job.aborted)
    writer = _Writer(job=job, offset_map=offset_map, state=state, throttle=throttle)
    groups = []
    for group in _group(to_clean, max_bytes=job.segment_bytes):
        groups.append(writer.write_group(directory, group))
    stats = dataclasses.replace(
        writer.stats,
        bytes_read=writer.stats.bytes_read + mapped_bytes,
        seconds=time.monotonic() - started,
    )
    checkpoint = Checkpoint(first_dirty_offset=map_end, delete_horizon_ms=writer.next_horizon_ms)
    return CleaningResult(groups=tuple(groups), checkpoint=checkpoint, stats=stats)


def _group(segments: Sequence[SourceSegment], *, max_bytes: int) -> list[list[SourceSegment]]:
    """Consecutive segments merged while their sizes add up to at most ``max_bytes`` and
    their offsets fit the indexes' int32 relative offsets (Kafka's groupSegmentsBySize)."""
    groups: list[list[SourceSegment]] = []
    for segment in segments:
        current = groups[-1] if groups else None
        if (
            current is not None
            and sum(s.size for s in current) + segment.size <= max_bytes
            and segment.end_offset - current[0].base_offset <= 2**31 - 1
        ):
            current.append(segment)
        else:
            groups.append([segment])
    return groups


def _segment_path(directory: Path, base_offset: int) -> Path:
    return directory / f"{base_offset:020d}.log"


def _batches(path: Path, size: int) -> Iterator[tuple[BatchHeader, bytes]]:
    """Every batch in the first ``size`` bytes of a segment file, read in large chunks."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunk, chunk_start, pos = b"", 0, 0
        while size - pos >= HEADER_SIZE:
            rel = pos - chunk_start
            if len(chunk) - rel < HEADER_SIZE:
                chunk, chunk_start, rel = (
                    os.pread(fd, min(READ_CHUNK_BYTES, size - pos), pos),
                    pos,
                    0,
                )
            header = parse_header(chunk, rel)
            if len(chunk) - rel < header.size:
                want = min(max(READ_CHUNK_BYTES, header.size), size - pos)
                chunk, chunk_start, rel = os.pread(fd, want, pos), pos, 0
            yield header, chunk[rel : rel + header.size]
            pos += header.size
    finally:
        os.close(fd)


class _Record(NamedTuple):
    """One record inside a decompressed batch payload, by position."""

    start: int
    end: int
    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    tombstone: bool


_ZIGZAG_1 = [(b >> 1) ^ -(b & 1) for b in range(0x80)]
"""The value of every one-byte varint: most record fields are one byte, and this loop is
the cleaner's hot spot (a table lookup instead of a call per field doubles its speed)."""


def _records(payload: bytes, count: int) -> list[_Record]:
    """The records of a decompressed batch payload (positions and what the cleaner needs)."""
    records = []
    zigzag = _ZIGZAG_1
    pos = 0
    for _ in range(count):
        b = payload[pos]
        length, p = (zigzag[b], pos + 1) if b < 0x80 else read_varint(payload, pos)
        end = p + length
        p += 1  # attributes
        b = payload[p]
        timestamp_delta, p = (zigzag[b], p + 1) if b < 0x80 else read_varint(payload, p)
        b = payload[p]
        offset_delta, p = (zigzag[b], p + 1) if b < 0x80 else read_varint(payload, p)
        b = payload[p]
        key_length, p = (zigzag[b], p + 1) if b < 0x80 else read_varint(payload, p)
        if key_length < 0:
            key = None
        else:
            key = payload[p : p + key_length]
            p += key_length
        tombstone = payload[p] == 0x01  # the varint -1: a null value
        records.append(_Record(pos, end, offset_delta, timestamp_delta, key, tombstone))
        pos = end
    return records


def _build_offset_map(
    job: CleaningJob, directory: Path, throttle: _Throttle
) -> tuple[dict[bytes, int], int, int]:
    """key -> latest offset over the dirty segments, whole segments only, until the budget
    is used up (at least one segment); with the offset it reaches and the bytes read."""
    offset_map: dict[bytes, int] = {}
    used = 0
    read = 0
    state = _TxnState(job.aborted)
    map_end = job.first_dirty_offset
    for segment in job.segments:
        if segment.end_offset <= job.first_dirty_offset:
            state.skip_to(segment.end_offset)
            continue
        if used > job.map_budget_bytes:
            break
        for header, batch in _batches(_segment_path(directory, segment.base_offset), segment.size):
            state.advance(header)
            if header.is_control:
                state.on_marker(header, control_type(batch))
                continue
            if state.is_aborted(header):
                continue
            payload = decompress(batch[HEADER_SIZE:], header.compression)
            for record in _records(payload, header.records_count):
                if record.key is not None:
                    if record.key not in offset_map:
                        used += len(record.key) + MAP_ENTRY_OVERHEAD_BYTES
                    offset_map[record.key] = header.base_offset + record.offset_delta
        read += segment.size
        throttle.account(segment.size)
        map_end = segment.end_offset
    return offset_map, map_end, read


class _TxnState:
    """Which producers are inside an aborted transaction as batches go by in offset order
    (Kafka's CleanedTransactionMetadata), and which committed ones kept data."""

    def __init__(self, aborted: Sequence[AbortedTxn]) -> None:
        self._aborted = sorted(aborted, key=lambda txn: txn.first_offset)
        self._firsts = [txn.first_offset for txn in self._aborted]
        self._next = 0
        self._in_aborted: set[int] = set()
        self._kept_data: set[int] = set()
        self.by_marker = {txn.last_offset: txn for txn in self._aborted}

    def skip_to(self, offset: int) -> None:
        """Forget transactions that ended below ``offset`` (a segment not read)."""
        self._next = max(self._next, bisect.bisect_left(self._firsts, offset))
        self._in_aborted = {
            txn.producer_id
            for txn in self._aborted[: self._next]
            if txn.first_offset < offset <= txn.last_offset
        }

    def advance(self, header: BatchHeader) -> None:
        while self._next < len(self._aborted) and self._firsts[self._next] <= header.last_offset:
            self._in_aborted.add(self._aborted[self._next].producer_id)
            self._next += 1

    def is_aborted(self, header: BatchHeader) -> bool:
        return header.is_transactional and header.producer_id in self._in_aborted

    def kept(self, header: BatchHeader) -> None:
        if header.is_transactional:
            self._kept_data.add(header.producer_id)

    def on_marker(self, header: BatchHeader, marker_type: int) -> bool:
        """A marker went by; True if its transaction has no data left (it can go after
        its delete horizon)."""
        producer_id = header.producer_id
        if marker_type == ABORT:
            self._in_aborted.discard(producer_id)
            self._kept_data.discard(producer_id)
            return True
        kept = producer_id in self._kept_data
        self._kept_data.discard(producer_id)
        return not kept


@dataclass(slots=True, kw_only=True)
class _Writer:
    """Writes cleaned groups of segments (step 2's second half)."""

    job: CleaningJob
    offset_map: dict[bytes, int]
    state: _TxnState
    throttle: _Throttle
    stats: CleanerStats = field(default_factory=CleanerStats)
    next_horizon_ms: int | None = None

    def write_group(self, directory: Path, group: list[SourceSegment]) -> CleanedGroup:
        base = group[0].base_offset
        log_path = cleaned_path(directory, base, ".log")
        kept_aborts: list[AbortedTxn] = []
        read = written = records_read = records_kept = 0
        with open(log_path, "wb") as out:
            for segment in group:
                path = _segment_path(directory, segment.base_offset)
                for header, batch in _batches(path, segment.size):
                    kept, n_read, n_kept = self._filter(header, batch)
                    records_read += n_read
                    records_kept += n_kept
                    if kept is not None:
                        out.write(kept)
                        written += len(kept)
                        if header.is_control and header.last_offset in self.state.by_marker:
                            kept_aborts.append(self.state.by_marker[header.last_offset])
                read += segment.size
                self.throttle.account(segment.size)
            out.flush()
            os.fsync(out.fileno())
        self.throttle.account(written)
        self._write_indexes(directory, base)
        if kept_aborts:
            txn_index = TransactionIndex(cleaned_path(directory, base, ".txnindex"))
            for txn in kept_aborts:
                txn_index.append(txn)
            txn_index.fsync()
        fsync_path(directory)
        self.stats = CleanerStats(
            bytes_read=self.stats.bytes_read + read,
            bytes_written=self.stats.bytes_written + written,
            records_read=self.stats.records_read + records_read,
            records_kept=self.stats.records_kept + records_kept,
        )
        return CleanedGroup(
            replaces=tuple(s.base_offset for s in group), txn_index=bool(kept_aborts)
        )

    def _write_indexes(self, directory: Path, base: int) -> None:
        """Index the cleaned .log by scanning it (it is in the page cache)."""
        log_path = cleaned_path(directory, base, ".log")
        segment = LogSegment(directory, base_offset=base, created_ms=0, log_path=log_path)
        try:
            segment.rebuild_indexes(index_interval_bytes=self.job.index_interval_bytes, dense=False)
            segment.seal_time_index()
            for extension in (".index", ".timeindex"):
                path = cleaned_path(directory, base, extension)
                index = segment.offset_index if extension == ".index" else segment.time_index
                index.write(path)
                fsync_path(path)
        finally:
            segment.close()

    def _filter(self, header: BatchHeader, batch: bytes) -> tuple[bytes | None, int, int]:
        """The batch to write instead of ``batch`` (None: drop it), records read and kept."""
        state = self.state
        state.advance(header)
        now_ms = self.job.now_ms
        if header.is_control:
            spent = state.on_marker(header, control_type(batch))
            if not spent:
                return batch, 0, 0
            if header.has_delete_horizon:
                if header.base_timestamp <= now_ms:
                    return None, 0, 0
                self._note_horizon(header.base_timestamp)
                return batch, 0, 0
            return self._rebuild(header, batch, keep=None), 0, 0
        if state.is_aborted(header):
            return None, header.records_count, 0
        payload = decompress(batch[HEADER_SIZE:], header.compression)
        records = _records(payload, header.records_count)
        keep = []
        has_tombstone = False
        for record in records:
            if record.key is None:
                continue
            offset = header.base_offset + record.offset_delta
            if self.offset_map.get(record.key, offset) > offset:
                continue  # superseded by a later record of the key
            if record.tombstone:
                if header.has_delete_horizon and header.base_timestamp <= now_ms:
                    continue  # its delete horizon passed
                has_tombstone = True
            keep.append(record)
        if not keep:
            return None, len(records), 0
        state.kept(header)
        if has_tombstone and header.has_delete_horizon:
            self._note_horizon(header.base_timestamp)
        if len(keep) == len(records) and (not has_tombstone or header.has_delete_horizon):
            return batch, len(records), len(keep)
        return (
            self._rebuild(header, batch, keep=(payload, keep), horizon=has_tombstone),
            len(records),
            len(keep),
        )

    def _note_horizon(self, horizon_ms: int) -> None:
        if self.next_horizon_ms is None or horizon_ms < self.next_horizon_ms:
            self.next_horizon_ms = horizon_ms

    def _rebuild(
        self,
        header: BatchHeader,
        batch: bytes,
        *,
        keep: tuple[bytes, list[_Record]] | None,
        horizon: bool = True,
    ) -> bytes:
        """``batch`` with only the ``keep`` records (None: all of them), stamped with a
        delete horizon if ``horizon`` and it has none yet."""
        if keep is None:
            payload = decompress(batch[HEADER_SIZE:], header.compression)
            keep = (payload, _records(payload, header.records_count))
        payload, records = keep
        base_timestamp = header.base_timestamp
        attributes = header.attributes
        if horizon and not header.has_delete_horizon:
            base_timestamp = self.job.now_ms + self.job.delete_retention_ms
            attributes |= DELETE_HORIZON_BIT
        if horizon:
            self._note_horizon(base_timestamp)
        body = bytearray()
        max_timestamp = NO_TIMESTAMP
        for record in records:
            timestamp = header.base_timestamp + record.timestamp_delta
            max_timestamp = max(max_timestamp, timestamp)
            if base_timestamp == header.base_timestamp:
                body += payload[record.start : record.end]
                continue
            _, first = read_varint(payload, record.start)
            _, after_delta = read_varint(payload, first + 1)
            rest = bytearray(payload[first : first + 1])  # attributes
            write_varint(rest, timestamp - base_timestamp)
            rest += payload[after_delta : record.end]
            write_varint(body, len(rest))
            body += rest
        if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
            max_timestamp = header.max_timestamp
        rebuilt = dataclasses.replace(
            header,
            attributes=attributes,
            base_timestamp=base_timestamp,
            max_timestamp=max_timestamp,
            records_count=len(records),
        )
        return encode_batch(rebuilt, compress(bytes(body), header.compression))
