"""Record batch v2 headers as stored: parse, validate, iterate, patch.

A batch (Kafka's ``DefaultRecordBatch``, magic 2) begins with a fixed 61-byte header, all
integers big-endian::

    offset  size  field
         0     8  base_offset
         8     4  batch_length          (bytes after this field: size = batch_length + 12)
        12     4  partition_leader_epoch
        16     1  magic                 (= 2)
        17     4  crc                   (CRC-32C of bytes 21..end, unsigned)
        21     2  attributes            (bits 0-2 codec, 3 timestamp type, 4 transactional,
                                         5 control, 6 delete horizon: see below)
        23     4  last_offset_delta
        27     8  base_timestamp
        35     8  max_timestamp
        43     8  producer_id
        51     2  producer_epoch
        53     4  base_sequence
        57     4  records_count
        61        records...

With the delete-horizon bit (KIP-534, set only by the log cleaner) ``base_timestamp`` is the
time after which the cleaner may remove the batch's tombstones and transaction markers;
record timestamps are still ``base_timestamp + timestamp_delta``.

The CRC does not cover the first 21 bytes, so the log assigns offsets by overwriting
``base_offset`` without recomputing it (Kafka's ``setLastOffset``). Nothing here decodes
records; see :mod:`riverbed.log.record_codec` for that.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c

from riverbed.log.errors import CorruptRecordError

HEADER_SIZE = 61
"""Kafka's DefaultRecordBatch.RECORD_BATCH_OVERHEAD."""
LOG_OVERHEAD = 12
"""base_offset + batch_length: the bytes not counted by batch_length (Kafka's LOG_OVERHEAD)."""
MAGIC = 2
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
NO_TIMESTAMP = -1
"""Kafka's RecordBatch.NO_TIMESTAMP."""
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_BASE_OFFSET = struct.Struct(">q")
_ATTRIBUTES = struct.Struct(">h")
_MAX_TIMESTAMP = struct.Struct(">q")
_CRC = struct.Struct(">I")

_CODEC_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40

assert _HEADER.size == HEADER_SIZE


class Compression(enum.IntEnum):
    """The codec in attribute bits 0-2 (Kafka's CompressionType ids)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(enum.Enum):
    """Attribute bit 3: who set the timestamps."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchHeader:
    """The 61-byte header of one stored record batch (layout in the module docstring)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies on disk and on the wire."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> Compression:
        """The codec; raises CorruptRecordError for the unused ids 5-7."""
        try:
            return Compression(self.attributes & _CODEC_MASK)
        except ValueError:
            raise CorruptRecordError(
                f"unknown compression codec {self.attributes & _CODEC_MASK}"
            ) from None

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & _TIMESTAMP_TYPE_BIT:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_BIT)

    @property
    def last_sequence(self) -> int:
        """Sequence number of the last record; wraps at int32 max like Kafka's
        DefaultRecordBatch.incrementSequence."""
        return increment_sequence(self.base_sequence, self.last_offset_delta)


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: sequences wrap from 2**31-1 to 0."""
    if sequence > 0x7FFFFFFF - increment:
        return increment - (0x7FFFFFFF - sequence) - 1
    return sequence + increment


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Decode the header at ``pos``; CorruptRecordError if fewer than 61 bytes or not magic 2.

    Checks only what the header itself can tell (magic, length, count); not the CRC.
    """
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(f"{len(buf) - pos} bytes is too short for a batch header")
    fields = _HEADER.unpack_from(buf, pos)
    header = BatchHeader(
        base_offset=fields[0],
        batch_length=fields[1],
        partition_leader_epoch=fields[2],
        magic=fields[3],
        crc=fields[4],
        attributes=fields[5],
        last_offset_delta=fields[6],
        base_timestamp=fields[7],
        max_timestamp=fields[8],
        producer_id=fields[9],
        producer_epoch=fields[10],
        base_sequence=fields[11],
        records_count=fields[12],
    )
    if header.magic != MAGIC:
        raise CorruptRecordError(f"magic {header.magic}, only magic 2 is supported")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(f"batch_length {header.batch_length} is below the header size")
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise CorruptRecordError("negative last_offset_delta or records_count")
    return header


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    """CRC-32C of a whole batch's bytes from ``attributes`` to the end."""
    return int(crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))


def check_crc(batch: bytes | bytearray | memoryview, header: BatchHeader) -> None:
    """CorruptRecordError unless the stored CRC matches the bytes of ``batch``."""
    actual = compute_crc(batch)
    if actual != header.crc:
        raise CorruptRecordError(f"CRC-32C mismatch: stored {header.crc:#010x}, got {actual:#010x}")


def validate_batch(buf: bytes | bytearray | memoryview) -> BatchHeader:
    """Validate exactly one batch as a producer sent it and return its header.

    Checks magic, that ``buf`` is exactly one batch long, the codec id, that
    ``records_count == last_offset_delta + 1`` (a produced batch has dense deltas) and the
    CRC-32C. Records themselves are not decoded (the broker stores batches as received).
    """
    header = parse_header(buf)
    if header.size != len(buf):
        raise CorruptRecordError(
            f"batch_length says {header.size} bytes but the buffer holds {len(buf)}"
        )
    header.compression  # noqa: B018 - raises for an unknown codec
    if header.records_count != header.last_offset_delta + 1:
        raise CorruptRecordError(
            f"records_count {header.records_count} != last_offset_delta + 1 "
            f"({header.last_offset_delta + 1})"
        )
    check_crc(buf, header)
    return header


def iter_batches(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` of each whole batch in ``buf``, in order.

    Stops silently at a trailing partial batch (a read cut at max_bytes, a torn write);
    raises CorruptRecordError for a header that cannot be a batch. CRCs are not checked.
    """
    pos = 0
    end = len(buf)
    while end - pos >= HEADER_SIZE:
        header = parse_header(buf, pos)
        if pos + header.size > end:
            return
        yield pos, header
        pos += header.size


def read_offset_and_size(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """(base_offset, size) of the batch at ``pos`` from its first 12 bytes; no validation."""
    base_offset, batch_length = _OFFSET_AND_LENGTH.unpack_from(buf, pos)
    return int(base_offset), int(batch_length) + LOG_OVERHEAD


def patch_base_offset(header_bytes: bytearray, base_offset: int) -> None:
    """Overwrite base_offset in place; the CRC does not cover it."""
    _BASE_OFFSET.pack_into(header_bytes, 0, base_offset)


def patch_log_append_time(
    header_bytes: bytearray, rest: bytes | bytearray | memoryview, *, timestamp_ms: int
) -> None:
    """Kafka's setMaxTimestamp(LOG_APPEND_TIME, now): set the timestamp-type bit and
    max_timestamp in the 61-byte ``header_bytes`` and recompute the CRC over header + ``rest``
    (the records, which are not copied)."""
    (attributes,) = _ATTRIBUTES.unpack_from(header_bytes, ATTRIBUTES_OFFSET)
    _ATTRIBUTES.pack_into(header_bytes, ATTRIBUTES_OFFSET, attributes | _TIMESTAMP_TYPE_BIT)
    _MAX_TIMESTAMP.pack_into(header_bytes, MAX_TIMESTAMP_OFFSET, timestamp_ms)
    crc = crc32c.crc32c(memoryview(header_bytes)[ATTRIBUTES_OFFSET:HEADER_SIZE])
    crc = crc32c.crc32c(rest, value=crc)
    _CRC.pack_into(header_bytes, CRC_OFFSET, crc)


def encode_header(header: BatchHeader) -> bytes:
    """The 61 bytes of ``header`` (used when building batches)."""
    return _HEADER.pack(
        header.base_offset,
        header.batch_length,
        header.partition_leader_epoch,
        header.magic,
        header.crc,
        header.attributes,
        header.last_offset_delta,
        header.base_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.records_count,
    )


def encode_batch(header: BatchHeader, payload: bytes | bytearray) -> bytes:
    """A complete batch: ``header`` (its batch_length and crc recomputed) + ``payload``
    (the records, compressed as the header's attributes say)."""
    batch = bytearray(
        encode_header(
            dataclasses.replace(
                header, batch_length=HEADER_SIZE - LOG_OVERHEAD + len(payload), crc=0
            )
        )
    )
    batch += payload
    _CRC.pack_into(batch, CRC_OFFSET, compute_crc(batch))
    return bytes(batch)


def make_attributes(
    *,
    compression: Compression,
    timestamp_type: TimestampType,
    is_transactional: bool,
    is_control: bool,
) -> int:
    attributes = int(compression)
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attributes |= _TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= _TRANSACTIONAL_BIT
    if is_control:
        attributes |= _CONTROL_BIT
    return attributes
