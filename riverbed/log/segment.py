"""One segment of a partition's log: a .log file of whole batches plus its indexes.

On disk, in the partition directory (Kafka's layout)::

    <base_offset:020d>.log        record batches exactly as stored, back to back
    <base_offset:020d>.index      see riverbed.log.index.OffsetIndex
    <base_offset:020d>.timeindex  see riverbed.log.index.TimeIndex
    <base_offset:020d>.txnindex   see riverbed.log.txn_index (only once it holds an abort)

``base_offset`` is the offset of the segment's first batch, or of the first batch of the
segments the cleaner merged into it. Only the last segment of a log (the *active* one) is
appended to; older ones are immutable, except that the cleaner replaces them whole (see
:mod:`riverbed.log.swap`): a cleaned segment's offsets have gaps where records were removed.

After a crash the tail of a .log file may hold a torn or garbage batch:
:meth:`LogSegment.recover` validates every batch (header, CRC-32C, offsets dense from the
segment's base) in one linear scan, truncates the file at the first bad one and rebuilds
both indexes (the txn index is rebuilt by the loader, which replays producer state in the
same scan). Segments below the log's recovery point are not scanned; their indexes are
loaded lazily, on first use, and rebuilt only if missing or failing the sanity check (a txn
index cannot be rebuilt alone: it is trusted as fsynced).

Threads: every method runs on the caller's (event-loop) thread, except that the log's
``flush`` fsyncs a ``dup`` of :attr:`LogSegment.fd` from a worker thread.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import crc32c

from riverbed.log.batch import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    NO_TIMESTAMP,
    BatchHeader,
    parse_header,
    read_offset_and_size,
)
from riverbed.log.errors import CorruptRecordError, StorageError
from riverbed.log.index import OffsetIndex, TimeIndex
from riverbed.log.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
SCAN_CHUNK_BYTES = 8 * 1024 * 1024
"""Read size of recovery scans: large sequential preads, a few per second of disk bandwidth."""
_SEEK_HEADER = struct.Struct(">qi11xi")  # base_offset, batch_length, last_offset_delta (27 B)
assert _SEEK_HEADER.size == 27


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def scan_batches(
    fd: int, *, start: int, end: int, check_crc: bool
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of the well-formed batches in ``fd[start:end]`` in order.

    Stops without raising at the first batch that is torn (runs past ``end``), has a bad
    header, or (``check_crc``) a CRC-32C mismatch; the caller sees where by the last position
    it got. Reads in chunks of SCAN_CHUNK_BYTES.
    """
    pos = start
    buf = b""
    buf_start = start
    while end - pos >= HEADER_SIZE:
        rel = pos - buf_start
        if len(buf) - rel < HEADER_SIZE:
            buf, buf_start, rel = os.pread(fd, min(SCAN_CHUNK_BYTES, end - pos), pos), pos, 0
        try:
            header = parse_header(buf, rel)
        except CorruptRecordError:
            return
        if header.size > end - pos:
            return
        if check_crc:
            if len(buf) - rel < header.size:
                want = min(max(SCAN_CHUNK_BYTES, header.size), end - pos)
                buf, buf_start, rel = os.pread(fd, want, pos), pos, 0
            body = memoryview(buf)[rel + ATTRIBUTES_OFFSET : rel + header.size]
            if crc32c.crc32c(body) != header.crc:
                return
        yield pos, header
        pos += header.size


class LogSegment:
    """A .log file and its indexes (format and crash behaviour in the module docstring)."""

    def __init__(
        self, directory: Path, *, base_offset: int, created_ms: int, log_path: Path | None = None
    ) -> None:
        """``log_path``: a .log file not (yet) under its live name, read only to index it
        (the cleaner's ``.cleaned`` file)."""
        self.directory = directory
        self._log_path = log_path
        self.base_offset = base_offset
        self.created_ms = created_ms
        self._fd: int | None = None
        self._size: int | None = None
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        # Known for the active segment and for segments that were scanned:
        self.next_offset: int | None = None
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.bytes_since_last_index_entry = 0
        self.txn_index = TransactionIndex(self.txn_index_path)

    # --- files ----------------------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        if self._log_path is not None:
            return self._log_path
        return self.directory / (segment_name(self.base_offset) + LOG_SUFFIX)

    @property
    def index_path(self) -> Path:
        return self.directory / (segment_name(self.base_offset) + INDEX_SUFFIX)

    @property
    def time_index_path(self) -> Path:
        return self.directory / (segment_name(self.base_offset) + TIME_INDEX_SUFFIX)

    @property
    def txn_index_path(self) -> Path:
        return self.directory / (segment_name(self.base_offset) + TXN_INDEX_SUFFIX)

    @classmethod
    def create(cls, directory: Path, *, base_offset: int, now_ms: int) -> LogSegment:
        """A new, empty active segment (an old file of the same name is emptied)."""
        segment = cls(directory, base_offset=base_offset, created_ms=now_ms)
        segment._fd = os.open(segment.log_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        segment._size = 0
        segment._offset_index = OffsetIndex(base_offset=base_offset)
        segment._time_index = TimeIndex(base_offset=base_offset)
        segment.next_offset = base_offset
        segment.index_path.unlink(missing_ok=True)
        segment.time_index_path.unlink(missing_ok=True)
        segment.txn_index.reset()
        return segment

    @property
    def fd(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.log_path, os.O_RDWR)
        return self._fd

    @property
    def size(self) -> int:
        if self._size is None:
            self._size = os.fstat(self.fd).st_size
        return self._size

    @property
    def offset_index(self) -> OffsetIndex:
        return self._indexes()[0]

    @property
    def time_index(self) -> TimeIndex:
        return self._indexes()[1]

    def _indexes(self) -> tuple[OffsetIndex, TimeIndex]:
        """Both indexes, loaded on first use (they are always set together)."""
        if self._offset_index is None or self._time_index is None:
            self._load_indexes()
        assert self._offset_index is not None and self._time_index is not None
        return self._offset_index, self._time_index

    def _load_indexes(self) -> None:
        offsets = OffsetIndex.load(
            self.index_path, base_offset=self.base_offset, log_size=self.size
        )
        times = TimeIndex.load(self.time_index_path, base_offset=self.base_offset)
        if offsets is None or times is None or (self.size and not times):
            self.rebuild_indexes(index_interval_bytes=None, dense=False)
            self.write_indexes()
            return
        self._offset_index, self._time_index = offsets, times
        last = times.last()
        if last is not None:
            self.max_timestamp, self.offset_of_max_timestamp = last

    # --- scanning and recovery ------------------------------------------------------------

    def rebuild_indexes(
        self,
        *,
        index_interval_bytes: int | None,
        on_batch: Callable[[int, BatchHeader], None] | None = None,
        check_crc: bool = False,
        dense: bool,
    ) -> int:
        """Rebuild both indexes (and the in-memory tail state) by scanning the whole file.

        With ``check_crc`` (recovery) this validates every batch and returns the position of
        the first bad one, else the file size; the caller truncates there. Offsets must be
        dense from base_offset with ``dense`` (a segment never cleaned), else only grow (a
        cleaned one). ``index_interval_bytes`` None means 4096 (Kafka's default).
        ``on_batch(position, header)`` is called for every valid batch, in order.
        """
        interval = 4096 if index_interval_bytes is None else index_interval_bytes
        self._offset_index = OffsetIndex(base_offset=self.base_offset)
        self._time_index = TimeIndex(base_offset=self.base_offset)
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        self.bytes_since_last_index_entry = 0
        expected = self.base_offset
        valid_end = 0
        for pos, header in scan_batches(self.fd, start=0, end=self.size, check_crc=check_crc):
            if (
                header.base_offset < expected
                or (dense and header.base_offset != expected)
                or header.records_count > header.last_offset_delta + 1
            ):
                break
            self.track(
                pos,
                base_offset=header.base_offset,
                max_timestamp=header.max_timestamp,
                size=header.size,
                index_interval_bytes=interval,
            )
            if on_batch is not None:
                on_batch(pos, header)
            expected = header.last_offset + 1
            valid_end = pos + header.size
        self.next_offset = expected
        return valid_end

    def truncate(self, position: int) -> None:
        """Cut the .log file at ``position`` (a batch boundary found by recovery)."""
        os.ftruncate(self.fd, position)
        self._size = position

    def load_active_tail(self, *, index_interval_bytes: int) -> bool:
        """After a clean shutdown: trust the indexes and scan (with CRCs) only from the last
        offset-index entry to the end. False if that does not end exactly at the file's end
        (then the caller recovers the segment instead)."""
        start_offset, start = self.offset_index.lookup(2**63 - 1)
        expected, end = start_offset, start
        for pos, header in scan_batches(self.fd, start=start, end=self.size, check_crc=True):
            if header.base_offset != expected:
                return False
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.base_offset
            expected, end = header.last_offset + 1, pos + header.size
        if end != self.size:
            return False
        self.next_offset = expected
        self.bytes_since_last_index_entry = min(end - start, index_interval_bytes + 1)
        return True

    # --- appending ------------------------------------------------------------------------

    def track(
        self,
        position: int,
        *,
        base_offset: int,
        max_timestamp: int,
        size: int,
        index_interval_bytes: int,
    ) -> None:
        """Account for the batch at ``position``: max timestamp and sparse index entries
        (one after every ``index_interval_bytes``, as Kafka's LogSegment.append)."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = base_offset
        if self.bytes_since_last_index_entry > index_interval_bytes:
            self.offset_index.append(base_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size

    def write(self, parts: list[bytes | bytearray | memoryview]) -> int:
        """Write the parts of one batch at the end of the file (no fsync); its position.

        On an I/O error the file is cut back to where it was and StorageError raised."""
        position = self.size
        total = sum(len(p) for p in parts)
        try:
            written = os.pwritev(self.fd, parts, position)
            if written < total:  # short write (signals, near-full disk): finish it
                rest = b"".join(bytes(p) for p in parts)[written:]
                while rest:
                    n = os.pwrite(self.fd, rest, position + written)
                    written += n
                    rest = rest[n:]
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, position)
            raise StorageError(f"cannot append to {self.log_path}: {exc}") from exc
        self._size = position + total
        return position

    # --- reading --------------------------------------------------------------------------

    def _seek(self, offset: int) -> tuple[int, int, int] | None:
        """(position, base_offset, size) of the batch holding ``offset`` (or the first one
        after it), by the offset index then a scan of 27-byte header prefixes."""
        _, position = self.offset_index.lookup(offset)
        end = self.size
        while end - position >= HEADER_SIZE:
            base, length, last_delta = _SEEK_HEADER.unpack(
                os.pread(self.fd, _SEEK_HEADER.size, position)
            )
            if base + last_delta >= offset:
                return position, base, length + 12
            position += length + 12
        return None

    def position_of(self, offset: int) -> int | None:
        """Position of the batch that holds ``offset``, None if it is past the end."""
        found = self._seek(offset)
        return None if found is None else found[0]

    def locate(
        self, position: int, *, max_bytes: int, max_offset: int | None, first: bool
    ) -> tuple[int, bool]:
        """How many bytes of whole batches to serve from ``position``: at most ``max_bytes``
        (but with ``first`` the first batch whole even if larger), none with base offset >=
        ``max_offset`` (None: no such limit in this segment).

        Returns that length and whether it reaches the end of the segment. The batches
        themselves are not read: only the headers near the cut, from the nearest offset-index
        entry below it (at most ``index_interval_bytes`` plus one header), so a fetch can send
        them from the file without copying them through Python."""
        limit = self.size
        if max_offset is not None and (self.next_offset is None or max_offset < self.next_offset):
            stop = self._seek(max_offset)
            if stop is not None:
                stop_pos, stop_base, stop_size = stop
                limit = stop_pos if stop_base >= max_offset else stop_pos + stop_size
        if limit <= position:
            return 0, limit == self.size
        end = position + min(max_bytes, limit - position)
        if end == limit:
            return limit - position, limit == self.size
        if first:
            _, first_size = read_offset_and_size(os.pread(self.fd, 12, position))
            if first_size >= end - position:  # Kafka's progress rule: the first batch, whole
                return min(first_size, limit - position), position + first_size >= self.size
        walk = max(self.offset_index.floor_position(end), position)
        tail = os.pread(self.fd, end - walk, walk)
        cut = 0
        while len(tail) - cut >= 12:
            _, size = read_offset_and_size(tail, cut)
            if cut + size > len(tail):
                break
            cut += size
        return walk + cut - position, False

    def read(
        self, position: int, *, max_bytes: int, max_offset: int | None, first: bool
    ) -> tuple[bytes, bool]:
        """Like :meth:`locate`, with the bytes themselves (one pread)."""
        length, reached_end = self.locate(
            position, max_bytes=max_bytes, max_offset=max_offset, first=first
        )
        return (os.pread(self.fd, length, position) if length else b""), reached_end

    # --- persistence ----------------------------------------------------------------------

    def seal_time_index(self) -> None:
        """Make the time index's last entry the segment's max timestamp (Kafka does this
        when a segment becomes inactive), so largest_timestamp is readable from the file."""
        if self.max_timestamp != NO_TIMESTAMP:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    def write_indexes(self) -> None:
        """Write both index files (no fsync)."""
        self.seal_time_index()
        self.offset_index.write(self.index_path)
        self.time_index.write(self.time_index_path)

    @property
    def largest_timestamp(self) -> int:
        """The largest batch max_timestamp in the segment (loads its time index)."""
        self.time_index  # noqa: B018 - a lazily loaded segment learns its max from the file
        return self.max_timestamp

    def read_batch(self, position: int) -> bytes:
        """The whole batch at ``position``."""
        _, size = read_offset_and_size(os.pread(self.fd, 12, position))
        return os.pread(self.fd, size, position)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def paths(self) -> tuple[Path, ...]:
        """Every file of the segment (the txn index may not exist)."""
        return (self.log_path, self.index_path, self.time_index_path, self.txn_index_path)

    def delete(self) -> None:
        self.close()
        for path in (self.log_path, self.index_path, self.time_index_path):
            path.unlink(missing_ok=True)
        self.txn_index.delete()
