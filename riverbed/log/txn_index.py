"""The aborted transactions of one segment: Kafka's ``.txnindex``.

On disk, ``<base_offset:020d>.txnindex`` beside the segment's .log, 34-byte entries,
big-endian, no header (Kafka's ``TransactionIndex`` / ``AbortedTxn`` layout)::

    version int16 = 0, producer_id int64, first_offset int64, last_offset int64,
    last_stable_offset int64

One entry per ABORT marker, appended (no fsync) to the index of the segment the marker was
written to, right after the marker: ``first_offset`` is where the aborted transaction began
(possibly in an earlier segment), ``last_offset`` the marker's offset, ``last_stable_offset``
the log's LSO just after the marker. Entries are in marker order. The file exists only once
its segment holds an abort.

When: appended on the event-loop thread when the log writes an ABORT marker, and by
recovery; fsynced with its segment's other files (the flush after a roll, close, the end of
recovery); read once, on first use, then cached, because a read_committed fetch asks for the
aborted transactions of its range on every fetch.

After a crash the index is not trusted for any segment the recovery scan covers (always the
active one): it is emptied and rebuilt from the markers in the .log. An index below the
recovery point was fsynced before the recovery point moved past it and is loaded as it is,
ignoring a torn trailing entry and everything from an entry of an unknown version on.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from riverbed.log.errors import StorageError
from riverbed.log.index import fsync_path

TXN_INDEX_SUFFIX = ".txnindex"
_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
assert _ENTRY.size == 34


@dataclass(frozen=True, slots=True, kw_only=True)
class AbortedTxn:
    """One aborted transaction of one producer (Kafka's AbortedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int
    """The offset of the ABORT marker."""
    last_stable_offset: int
    """The log's last stable offset just after the marker was written."""


class TransactionIndex:
    """The ``.txnindex`` of one segment (format and crash behaviour in the module docstring).

    Nothing is read or written until first used."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None
        self._written = 0  # entries known to be in the file

    @property
    def entries(self) -> list[AbortedTxn]:
        """Every entry, in marker order (loaded from the file on first use; do not mutate)."""
        if self._entries is None:
            self._entries = _load(self.path)
            self._written = len(self._entries)
        return self._entries

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry to the cache, then to the file (no fsync).

        StorageError if the write fails; the cache keeps the entry (so reads stay right while
        the process lives) and the next append writes it again."""
        entries = self.entries
        entries.append(txn)
        position = self._written * _ENTRY.size
        data = b"".join(
            _ENTRY.pack(
                _VERSION, t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset
            )
            for t in entries[self._written :]
        )
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.ftruncate(fd, position)  # a torn tail from before a crash goes first
                written = os.pwrite(fd, data, position)
            finally:
                os.close(fd)
        except OSError as exc:
            raise StorageError(f"cannot append to {self.path}: {exc}") from exc
        if written != len(data):
            raise StorageError(f"short write to {self.path}: {written} of {len(data)} bytes")
        self._written = len(entries)

    def collect(
        self, *, start_offset: int, upper_bound_offset: int, into: list[AbortedTxn]
    ) -> bool:
        """Append to ``into`` the entries overlapping [start_offset, upper_bound_offset).

        True when no later index can hold one (Kafka's TxnIndexSearchResult.isComplete): an
        entry whose LSO is >= the upper bound means every transaction still open then, and
        every later one, begins at or after the upper bound."""
        for txn in self.entries:
            if txn.last_offset >= start_offset and txn.first_offset < upper_bound_offset:
                into.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return True
        return False

    def reset(self) -> None:
        """Forget every entry and remove the file (a new segment; recovery's rebuild)."""
        self.path.unlink(missing_ok=True)
        self._entries = []
        self._written = 0

    def fsync(self) -> None:
        """fsync the file if there is one."""
        if self.path.exists():
            fsync_path(self.path)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self._entries = []
        self._written = 0


def collect_aborted(
    indexes: Iterable[TransactionIndex], *, start_offset: int, upper_bound_offset: int
) -> list[AbortedTxn]:
    """The aborted transactions overlapping [start_offset, upper_bound_offset), ordered by
    first offset, from the indexes of the segment holding ``start_offset`` and all later
    ones (Kafka's UnifiedLog.collectAbortedTransactions)."""
    found: list[AbortedTxn] = []
    for index in indexes:
        if index.collect(
            start_offset=start_offset, upper_bound_offset=upper_bound_offset, into=found
        ):
            break
    found.sort(key=lambda txn: txn.first_offset)
    return found


def _load(path: Path) -> list[AbortedTxn]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    entries = []
    for pos in range(0, len(data) - _ENTRY.size + 1, _ENTRY.size):  # a torn tail is skipped
        version, producer_id, first, last, last_stable = _ENTRY.unpack_from(data, pos)
        if version != _VERSION:
            break
        entries.append(
            AbortedTxn(
                producer_id=producer_id,
                first_offset=first,
                last_offset=last,
                last_stable_offset=last_stable,
            )
        )
    return entries
