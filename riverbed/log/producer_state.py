"""Idempotent-producer state of one partition: epochs and recent sequence ranges.

Per producer id the log keeps the current epoch and the last
:data:`NUM_BATCHES_TO_RETAIN` batches' ``(first_seq, last_seq, first_offset, last_offset,
timestamp_ms)``, as Kafka's ``ProducerStateEntry``. The rules follow Kafka's
``ProducerAppendInfo``:

- an epoch older than the current one is fenced (InvalidProducerEpochError);
- a batch equal (same epoch, first and last sequence) to a retained one is a duplicate: the
  caller answers with the original offsets and writes nothing;
- a newer epoch must start at sequence 0 (OutOfOrderSequenceError otherwise), and forgets
  the old epoch's batches;
- in the same epoch the first sequence must follow the last one (wrapping from 2**31-1 to 0);
- a producer the partition has no state for is accepted at any sequence (Kafka stopped
  returning UNKNOWN_PRODUCER_ID with KIP-360: "If there is no current producer epoch ...
  accept writes with any sequence number").

Control batches only move the epoch; batches without a producer id are not tracked.

Snapshots (``<20-digit offset>.snapshot``, the state after every batch below ``offset``)::

    magic b"RBPS", version int16 = 1, crc uint32 (CRC-32C of all bytes after it),
    count int32, then per producer: producer_id int64, epoch int16, count int8,
    and per batch: first_seq int32, last_seq int32, first_offset int64, last_offset int64,
    timestamp_ms int64

Written by rename at segment roll and at close, fsynced by the log before the recovery point
moves past them. After a crash a snapshot that fails its CRC is ignored and an older one is
used; the log replays batch headers from there.
"""

from __future__ import annotations

import os
import struct
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from riverbed.log.batch import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader, increment_sequence
from riverbed.log.errors import InvalidProducerEpochError, OutOfOrderSequenceError

NUM_BATCHES_TO_RETAIN = 5
"""Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN (clients keep at most 5 in flight)."""
SNAPSHOT_SUFFIX = ".snapshot"
_MAGIC = b"RBPS"
_VERSION = 1
_PREFIX = struct.Struct(">4shI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhb")
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


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


class ProducerStateManager:
    """The producer entries of one partition (see the module docstring)."""

    def __init__(self) -> None:
        self.entries: dict[int, ProducerEntry] = {}

    def check(self, header: BatchHeader) -> BatchMetadata | None:
        """Validate a produced batch against the state; the retained metadata if it is a
        duplicate, else None. Changes nothing (call :meth:`update` after the write)."""
        if header.producer_id < 0 or header.is_control:
            return None
        entry = self.entries.get(header.producer_id)
        if entry is None:
            return None
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {header.producer_id} epoch {header.producer_epoch} is older than "
                f"the current {entry.epoch}"
            )
        if header.producer_epoch != entry.epoch:
            if header.base_sequence != 0 and entry.epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"producer {header.producer_id}: new epoch {header.producer_epoch} must "
                    f"start at sequence 0, not {header.base_sequence}"
                )
            return None
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
        return None

    def update(self, header: BatchHeader) -> None:
        """Record a batch that is now in the log (``header`` with its final offsets)."""
        if header.producer_id < 0:
            return
        entry = self.entries.get(header.producer_id)
        if entry is None:
            entry = ProducerEntry(producer_id=header.producer_id, epoch=header.producer_epoch)
            self.entries[header.producer_id] = entry
        elif header.producer_epoch != entry.epoch:
            entry.epoch = header.producer_epoch
            entry.batches.clear()
        if header.is_control:
            return
        entry.batches.append(
            BatchMetadata(
                first_seq=header.base_sequence,
                last_seq=header.last_sequence,
                first_offset=header.base_offset,
                last_offset=header.last_offset,
                timestamp_ms=header.max_timestamp,
            )
        )

    def epoch(self, producer_id: int) -> int | None:
        entry = self.entries.get(producer_id)
        return None if entry is None else entry.epoch

    # --- snapshots ------------------------------------------------------------------------

    def encode(self) -> bytes:
        body = bytearray(_COUNT.pack(len(self.entries)))
        for entry in self.entries.values():
            body += _ENTRY.pack(entry.producer_id, entry.epoch, len(entry.batches))
            for b in entry.batches:
                body += _BATCH.pack(
                    b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp_ms
                )
        return _PREFIX.pack(_MAGIC, _VERSION, crc32c.crc32c(body)) + bytes(body)

    @classmethod
    def decode(cls, data: bytes) -> ProducerStateManager | None:
        """The state in a snapshot's bytes, or None if they are damaged."""
        if len(data) < _PREFIX.size + _COUNT.size:
            return None
        magic, version, crc = _PREFIX.unpack_from(data, 0)
        body = memoryview(data)[_PREFIX.size :]
        if magic != _MAGIC or version != _VERSION or crc32c.crc32c(body) != crc:
            return None
        state = cls()
        try:
            (count,) = _COUNT.unpack_from(body, 0)
            pos = _COUNT.size
            for _ in range(count):
                producer_id, epoch, n = _ENTRY.unpack_from(body, pos)
                pos += _ENTRY.size
                entry = ProducerEntry(producer_id=producer_id, epoch=epoch)
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
