"""Sparse indexes of one segment: offset -> file position, and timestamp -> offset.

On disk (Kafka's formats, big-endian, no header):

- ``<base>.index``: 8-byte entries ``(relative_offset int32, position int32)``, one for
  the first batch after every ``index.interval.bytes`` of log, where ``relative_offset`` is
  that batch's **base** offset minus the segment's base offset (Kafka stores the batch's last
  offset; storing the base lets a fetch at a batch boundary land on it directly);
- ``<base>.timeindex``: 12-byte entries ``(timestamp int64, relative_offset int32)``: the
  largest batch max_timestamp seen so far in the segment, and the base offset of the first
  batch that reached it; appended with the offset entries, only when the timestamp grows.

Both are kept in memory (arrays) and written whole when their segment stops being active
(roll) and at clean shutdown; the active segment's indexes exist only in memory.

After a crash: the indexes are **not checksummed**. They are trusted only for segments
below the recovery point (written and fsynced at roll, before the recovery point moved past
them) and after a clean shutdown, and even then :meth:`SparseIndex.load` sanity-checks them
(size a multiple of the entry size, keys strictly increasing, offsets/positions in range);
anything else is rebuilt by scanning the segment's batches.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path

INT32_MAX = 2**31 - 1


class SparseIndex:
    """Sorted (key, value) pairs with floor lookup; the file format is set by subclasses."""

    _ENTRY: struct.Struct
    _KEY_IS_OFFSET: bool

    def __init__(self, *, base_offset: int) -> None:
        self.base_offset = base_offset
        self.keys = array("q")
        self.values = array("q")

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def size_bytes(self) -> int:
        return len(self.keys) * self._ENTRY.size

    def floor(self, key: int) -> int | None:
        """Index of the last entry whose key is <= ``key``, or None."""
        i = bisect.bisect_right(self.keys, key)
        return i - 1 if i else None

    def last(self) -> tuple[int, int] | None:
        return (self.keys[-1], self.values[-1]) if self.keys else None

    def _pack(self, key: int, value: int) -> bytes:
        raise NotImplementedError

    def _unpack(self, data: bytes, pos: int) -> tuple[int, int]:
        raise NotImplementedError

    def write(self, path: Path) -> None:
        """Replace ``path`` with the whole index (no fsync; see :func:`fsync_path`)."""
        data = b"".join(self._pack(k, v) for k, v in zip(self.keys, self.values, strict=True))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def _load_entries(self, path: Path) -> bool:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return False
        size = self._ENTRY.size
        if len(data) % size:
            return False
        for pos in range(0, len(data), size):
            key, value = self._unpack(data, pos)
            if self.keys and key <= self.keys[-1]:
                return False
            self.keys.append(key)
            self.values.append(value)
        return True


class OffsetIndex(SparseIndex):
    """Batch base offset -> byte position of that batch in the segment's .log file."""

    _ENTRY = struct.Struct(">ii")

    def append(self, offset: int, position: int) -> None:
        self.keys.append(offset)
        self.values.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last indexed batch starting at or before ``offset``;
        (base_offset, 0) if none."""
        i = self.floor(offset)
        if i is None:
            return self.base_offset, 0
        return self.keys[i], self.values[i]

    def floor_position(self, position: int) -> int:
        """The largest indexed batch position <= ``position`` (0 if none)."""
        i = bisect.bisect_right(self.values, position)
        return self.values[i - 1] if i else 0

    def _pack(self, key: int, value: int) -> bytes:
        return self._ENTRY.pack(key - self.base_offset, value)

    def _unpack(self, data: bytes, pos: int) -> tuple[int, int]:
        relative, position = self._ENTRY.unpack_from(data, pos)
        return self.base_offset + relative, position

    @classmethod
    def load(cls, path: Path, *, base_offset: int, log_size: int) -> OffsetIndex | None:
        """The index in ``path``, or None if it is missing or fails the sanity check."""
        index = cls(base_offset=base_offset)
        if not index._load_entries(path):
            return None
        positions_ok = all(b > a for a, b in zip(index.values, index.values[1:], strict=False))
        if index.keys and (
            index.keys[0] < base_offset
            or not positions_ok
            or index.values[0] < 0
            or index.values[-1] >= log_size
        ):
            return None
        return index


class TimeIndex(SparseIndex):
    """Largest batch max_timestamp so far -> base offset of the batch that first reached it."""

    _ENTRY = struct.Struct(">qi")

    def maybe_append(self, timestamp_ms: int, offset: int) -> None:
        if not self.keys or timestamp_ms > self.keys[-1]:
            self.keys.append(timestamp_ms)
            self.values.append(offset)

    def lookup(self, timestamp_ms: int) -> int:
        """Base offset of a batch at or before the first batch whose max_timestamp is >=
        ``timestamp_ms``; the segment's base offset if no entry is small enough."""
        i = self.floor(timestamp_ms)
        return self.base_offset if i is None else self.values[i]

    def _pack(self, key: int, value: int) -> bytes:
        return self._ENTRY.pack(key, value - self.base_offset)

    def _unpack(self, data: bytes, pos: int) -> tuple[int, int]:
        timestamp, relative = self._ENTRY.unpack_from(data, pos)
        return timestamp, self.base_offset + relative

    @classmethod
    def load(cls, path: Path, *, base_offset: int) -> TimeIndex | None:
        index = cls(base_offset=base_offset)
        if not index._load_entries(path):
            return None
        if any(v < base_offset for v in index.values):
            return None
        return index


def fsync_path(path: Path) -> None:
    """fsync one file (or directory) by name."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
