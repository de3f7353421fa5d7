"""Idempotent and transactional producer state of one partition.

Per producer id the log keeps the current epoch, the last :data:`NUM_BATCHES_TO_RETAIN`
batches' ``(first_seq, last_seq, first_offset, last_offset, timestamp_ms)`` and the first
offset of its ongoing transaction, as Kafka's ``ProducerStateEntry``. The rules follow
Kafka's ``ProducerAppendInfo``:

- an epoch older than the current one is fenced (InvalidProducerEpochError);
- a batch equal (same epoch, first and last sequence) to a retained one is a duplicate: the
  caller answers with the original offsets and writes nothing;
- a newer epoch must start at sequence 0 (OutOfOrderSequenceError otherwise), and forgets
  the old epoch's batches;
- in the same epoch the first sequence must follow the last one (wrapping from 2**31-1 to 0);
- a producer the partition has no state for is accepted at any sequence (Kafka stopped
  returning UNKNOWN_PRODUCER_ID with KIP-360: "If there is no current producer epoch ...
  accept writes with any sequence number");
- a batch with base sequence -1 is one the broker wrote itself (transactional offsets in
  ``__consumer_offsets``): only its epoch is checked, and it is not retained, as Kafka skips
  sequence checks for coordinator appends;
- a transactional batch from a producer without an ongoing transaction begins one at its
  base offset; a non-transactional batch from a producer with one is refused
  (InvalidTxnStateError);
- a transaction marker (control batch) must not have an older epoch
  (InvalidProducerEpochError, checked by :meth:`ProducerStateManager.check_marker`); it moves
  the epoch and completes the ongoing transaction, if there is one.

Batches without a producer id are not tracked. The first offset of the oldest ongoing
transaction is the log's first unstable offset: the last stable offset (LSO) a read_committed
consumer may read up to.

Snapshots (``<20-digit offset>.snapshot``, the state after every batch below ``offset``)::

    magic b"RBPS", version int16 = 2, crc uint32 (CRC-32C of all bytes after it),
    count int32, then per producer: producer_id int64, epoch int16,
    txn_first_offset int64 (-1: no ongoing transaction), count int8,
    and per batch: first_seq int32, last_seq int32, first_offset int64, last_offset int64,
    timestamp_ms int64

Version 1 (before transactions) lacks ``txn_first_offset``; it is still read, as a state
without ongoing transactions.

Written by rename at segment roll and at close, fsynced by the log before the recovery point
moves past them. After a crash a snapshot that fails its CRC is ignored and an older one is
used; the log replays batch headers from there (a marker completes a transaction whatever
its type, so headers are enough).
"""

from __future__ import annotations

import os
import struct
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from riverbed.log.batch import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader, increment_sequence
from riverbed.log.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
)
from riverbed.log.txn_index import AbortedTxn

NUM_BATCHES_TO_RETAIN = 5
"""Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN (clients keep at most 5 in flight)."""
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOTS_TO_KEEP_BELOW_RECOVERY_POINT = 2
"""Kafka keeps a couple of old producer snapshots; one below the recovery point suffices."""
_MAGIC = b"RBPS"
_VERSION = 2
_PREFIX = struct.Struct(">4shI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhqb")  # producer_id, epoch, txn_first_offset, count
_ENTRY_V1 = struct.Struct(">qhb")
_NO_TXN = -1
_BATCH = struct.Struct(">iiqqq")


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchMetadata:
    """Where one retained batch of a producer went."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


@dataclass(slots=True, kw_only=True)
class ProducerEntry:
    producer_id: int
    epoch: int
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN)
    )
    current_txn_first_offset: int | None = None
    """First offset of the producer's ongoing transaction; None when there is none."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CompletedTxn:
    """A transaction a marker just completed (Kafka's CompletedTxn, without its type)."""

    producer_id: int
    first_offset: int
    last_offset: int
    """The marker's offset."""


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


class ProducerStateManager:
    """The producer entries of one partition (see the module docstring)."""

    def __init__(self) -> None:
        self.entries: dict[int, ProducerEntry] = {}
        # producer id -> first offset of its ongoing transaction, in first-offset order:
        # transactions begin at the log end offset, which only grows, so insertion order is
        # offset order and the first value is the smallest. Finding it skips the slots of
        # completed transactions at the front of the dict's entry table, which its next
        # resize compacts: O(1) with few open transactions, O(open transactions) at worst.
        self._ongoing: dict[int, int] = {}

    def check(self, header: BatchHeader) -> BatchMetadata | None:
        """Validate a produced data batch against the state; the retained metadata if it is
        a duplicate, else None. Changes nothing (call :meth:`update` after the write)."""
        if header.producer_id < 0:
            return None
        entry = self.entries.get(header.producer_id)
        if entry is None:
            return None
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {header.producer_id} epoch {header.producer_epoch} is older than "
                f"the current {entry.epoch}"
            )
        if header.base_sequence == NO_SEQUENCE:
            pass  # the broker's own batch (TxnOffsetCommit): no sequence, as Kafka's
            # coordinator appends, which skip the sequence checks
        elif header.producer_epoch != entry.epoch:
            if header.base_sequence != 0 and entry.epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"producer {header.producer_id}: new epoch {header.producer_epoch} must "
                    f"start at sequence 0, not {header.base_sequence}"
                )
        else:
            last_seq = header.last_sequence
            for batch in entry.batches:
                if batch.first_seq == header.base_sequence and batch.last_seq == last_seq:
                    return batch
            current = entry.batches[-1].last_seq if entry.batches else NO_SEQUENCE
            expected = increment_sequence(current, 1)
            if entry.epoch != NO_PRODUCER_EPOCH and header.base_sequence != expected:
                raise OutOfOrderSequenceError(
                    f"producer {header.producer_id}: sequence {header.base_sequence} does not "
                    f"follow {current}"
                )
        if entry.current_txn_first_offset is not None and not header.is_transactional:
            raise InvalidTxnStateError(
                f"producer {header.producer_id} has a transaction open since offset "
                f"{entry.current_txn_first_offset}; it sent a non-transactional batch"
            )
        return None

    def check_marker(self, *, producer_id: int, producer_epoch: int) -> None:
        """InvalidProducerEpochError if a marker of ``producer_epoch`` is fenced."""
        entry = self.entries.get(producer_id)
        if entry is not None and producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"marker for producer {producer_id} has epoch {producer_epoch}, older than "
                f"the current {entry.epoch}"
            )

    def update(self, header: BatchHeader) -> CompletedTxn | None:
        """Record a batch that is now in the log (``header`` with its final offsets); for a
        marker, the transaction it completed (None if the producer had none open)."""
        if header.producer_id < 0:
            return None
        entry = self.entries.get(header.producer_id)
        if entry is None:
            entry = ProducerEntry(producer_id=header.producer_id, epoch=header.producer_epoch)
            self.entries[header.producer_id] = entry
        elif header.producer_epoch != entry.epoch:
            entry.epoch = header.producer_epoch
            entry.batches.clear()
        if header.is_control:
            first = entry.current_txn_first_offset
            if first is None:
                return None
            entry.current_txn_first_offset = None
            del self._ongoing[header.producer_id]
            return CompletedTxn(
                producer_id=header.producer_id, first_offset=first, last_offset=header.base_offset
            )
        if header.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = header.base_offset
            self._ongoing[header.producer_id] = header.base_offset
        if header.base_sequence == NO_SEQUENCE:
            return None  # written by the broker itself: no sequence to remember
        entry.batches.append(
            BatchMetadata(
                first_seq=header.base_sequence,
                last_seq=header.last_sequence,
                first_offset=header.base_offset,
                last_offset=header.last_offset,
                timestamp_ms=header.max_timestamp,
            )
        )
        return None

    def epoch(self, producer_id: int) -> int | None:
        entry = self.entries.get(producer_id)
        return None if entry is None else entry.epoch

    # --- transactions ---------------------------------------------------------------------

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest ongoing transaction; None if none is open.

        Called on every fetch: cheap (see ``_ongoing`` in __init__)."""
        return next(iter(self._ongoing.values()), None)

    def ongoing_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its ongoing transaction (a copy)."""
        return dict(self._ongoing)

    def has_ongoing_transaction(self, producer_id: int) -> bool:
        return producer_id in self._ongoing

    def aborted(self, completed: CompletedTxn) -> AbortedTxn:
        """The txn-index entry of ``completed`` if its marker aborted it: the LSO is the one
        just after the marker, with ``completed`` no longer open (Kafka's
        ProducerStateManager.lastStableOffset(completedTxn))."""
        first_unstable = self.first_unstable_offset()
        return AbortedTxn(
            producer_id=completed.producer_id,
            first_offset=completed.first_offset,
            last_offset=completed.last_offset,
            last_stable_offset=(
                completed.last_offset + 1 if first_unstable is None else first_unstable
            ),
        )

    # --- snapshots ------------------------------------------------------------------------

    def encode(self) -> bytes:
        body = bytearray(_COUNT.pack(len(self.entries)))
        for entry in self.entries.values():
            txn_first = entry.current_txn_first_offset
            body += _ENTRY.pack(
                entry.producer_id,
                entry.epoch,
                _NO_TXN if txn_first is None else txn_first,
                len(entry.batches),
            )
            for b in entry.batches:
                body += _BATCH.pack(
                    b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp_ms
                )
        return _PREFIX.pack(_MAGIC, _VERSION, crc32c.crc32c(body)) + bytes(body)

    @classmethod
    def decode(cls, data: bytes) -> ProducerStateManager | None:
        """The state in a snapshot's bytes (version 1 or 2), or None if they are damaged."""
        if len(data) < _PREFIX.size + _COUNT.size:
            return None
        magic, version, crc = _PREFIX.unpack_from(data, 0)
        body = memoryview(data)[_PREFIX.size :]
        if magic != _MAGIC or version not in (1, _VERSION) or crc32c.crc32c(body) != crc:
            return None
        state = cls()
        try:
            (count,) = _COUNT.unpack_from(body, 0)
            pos = _COUNT.size
            for _ in range(count):
                if version == 1:
                    producer_id, epoch, n = _ENTRY_V1.unpack_from(body, pos)
                    txn_first, pos = _NO_TXN, pos + _ENTRY_V1.size
                else:
                    producer_id, epoch, txn_first, n = _ENTRY.unpack_from(body, pos)
                    pos += _ENTRY.size
                entry = ProducerEntry(
                    producer_id=producer_id,
                    epoch=epoch,
                    current_txn_first_offset=None if txn_first == _NO_TXN else txn_first,
                )
                for _ in range(n):
                    first_seq, last_seq, first, last, ts = _BATCH.unpack_from(body, pos)
                    pos += _BATCH.size
                    entry.batches.append(
                        BatchMetadata(
                            first_seq=first_seq,
                            last_seq=last_seq,
                            first_offset=first,
                            last_offset=last,
                            timestamp_ms=ts,
                        )
                    )
                state.entries[producer_id] = entry
        except struct.error:
            return None
        ongoing = sorted(
            (e.current_txn_first_offset, e.producer_id)
            for e in state.entries.values()
            if e.current_txn_first_offset is not None
        )
        state._ongoing = {producer_id: first for first, producer_id in ongoing}
        return state if pos == len(body) else None

    def write_snapshot(self, directory: Path, *, offset: int) -> Path:
        """Write ``<offset>.snapshot`` by rename; not fsynced (the caller does that)."""
        path = snapshot_path(directory, offset)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(self.encode())
        os.replace(tmp, path)
        return path


def list_snapshots(directory: Path) -> list[int]:
    """Offsets of the snapshot files in ``directory``, ascending."""
    offsets = []
    for path in directory.glob(f"*{SNAPSHOT_SUFFIX}"):
        stem = path.name[: -len(SNAPSHOT_SUFFIX)]
        if stem.isdigit():
            offsets.append(int(stem))
    return sorted(offsets)


def load_latest_snapshot(
    directory: Path, *, at_most: int
) -> tuple[int, ProducerStateManager] | None:
    """The newest readable snapshot with offset <= ``at_most``; damaged ones are deleted."""
    for offset in reversed(list_snapshots(directory)):
        if offset > at_most:
            continue
        path = snapshot_path(directory, offset)
        state = ProducerStateManager.decode(path.read_bytes())
        if state is not None:
            return offset, state
        path.unlink()
    return None


def delete_snapshots(
    directory: Path, *, above: int | None = None, below: int | None = None
) -> None:
    """Remove snapshots with offset > ``above`` or < ``below``."""
    for offset in list_snapshots(directory):
        if (above is not None and offset > above) or (below is not None and offset < below):
            snapshot_path(directory, offset).unlink(missing_ok=True)


def trim_snapshots(directory: Path, *, recovery_point: int) -> None:
    """Remove the snapshots older than the newest
    :data:`SNAPSHOTS_TO_KEEP_BELOW_RECOVERY_POINT` at or below ``recovery_point`` (the log
    calls this whenever its recovery point moves)."""
    below = [offset for offset in list_snapshots(directory) if offset <= recovery_point]
    if len(below) > SNAPSHOTS_TO_KEEP_BELOW_RECOVERY_POINT:
        delete_snapshots(directory, below=below[-SNAPSHOTS_TO_KEEP_BELOW_RECOVERY_POINT])
