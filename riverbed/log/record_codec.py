"""Records inside a v2 batch: decode them, and build whole batches.

Record layout (Kafka's DefaultRecord), after the 61-byte batch header and possibly
compressed as one block by the batch's codec::

    length varint, attributes int8, timestamp_delta varlong, offset_delta varint,
    key_length varint (-1 = null), key, value_length varint (-1 = null), value,
    headers_count varint, headers: [key_length varint, key utf-8, value_length varint, value]

Varints are zig-zag encoded protobuf varints. The broker's produce path never comes here
(batches are stored as received); this is for offset-for-timestamp lookups, tests, and
batches the broker writes itself (control batches).

A transaction marker (Kafka's ``EndTransactionMarker``) is a transactional control batch
of one record: key ``version int16 = 0, type int16`` (:data:`ABORT` or :data:`COMMIT`),
value ``version int16 = 0, coordinator_epoch int32``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from riverbed.log.batch import (
    HEADER_SIZE,
    MAGIC,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    BatchHeader,
    Compression,
    TimestampType,
    encode_batch,
    make_attributes,
    parse_header,
)
from riverbed.log.compression import compress, decompress
from riverbed.log.errors import CorruptRecordError

Headers = tuple[tuple[str, bytes | None], ...]

ABORT = 0
"""Kafka's ControlRecordType.ABORT: the type id in a transaction marker's key."""
COMMIT = 1
"""Kafka's ControlRecordType.COMMIT."""
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_MARKER_VALUE = struct.Struct(">hi")  # version, coordinator_epoch


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """One decoded record, with its absolute offset and timestamp (epoch ms)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class SimpleRecord:
    """A record to put into a new batch (Kafka's SimpleRecord); no offset yet.

    ``timestamp_ms`` None means "the batch's base timestamp".
    """

    key: bytes | None = None
    value: bytes | None = None
    headers: Headers = ()
    timestamp_ms: int | None = None


# --- varints -------------------------------------------------------------------------------


def write_varint(out: bytearray, value: int) -> None:
    zigzag = (value << 1) ^ (value >> 63)
    zigzag &= 0xFFFFFFFFFFFFFFFF
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """The zigzag varint at ``pos`` and the position after it."""
    if pos + 1 < len(buf):  # fast paths: record fields are mostly one or two bytes
        first = buf[pos]
        if first < 0x80:
            return (first >> 1) ^ -(first & 1), pos + 1
        second = buf[pos + 1]
        if second < 0x80:
            value = (first & 0x7F) | (second << 7)
            return (value >> 1) ^ -(value & 1), pos + 2
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise CorruptRecordError("varint runs past the end of the records")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")
    return (result >> 1) ^ -(result & 1), pos


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > len(buf):
        raise CorruptRecordError("record field runs past the end of the records")
    return buf[pos : pos + length], pos + length


def _write_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        write_varint(out, -1)
    else:
        write_varint(out, len(value))
        out += value


# --- decoding ------------------------------------------------------------------------------


def decode_records(batch: bytes | bytearray | memoryview) -> list[Record]:
    """Every record of one whole batch (as stored or as produced), decompressed.

    For LogAppendTime batches each record's timestamp is the batch's max_timestamp, as in
    Kafka. Raises CorruptRecordError for anything that does not decode; does not check the
    CRC (see :func:`riverbed.log.batch.validate_batch`).
    """
    view = memoryview(batch)
    header = parse_header(view)
    if header.size > len(view):
        raise CorruptRecordError("batch is truncated")
    payload = decompress(view[HEADER_SIZE : header.size], header.compression)
    log_append_time = header.timestamp_type is TimestampType.LOG_APPEND_TIME
    records: list[Record] = []
    pos = 0
    for _ in range(header.records_count):
        length, pos = read_varint(payload, pos)
        end = pos + length
        if length < 0 or end > len(payload):
            raise CorruptRecordError("record length runs past the end of the batch")
        pos += 1  # attributes: unused by magic 2
        timestamp_delta, pos = read_varint(payload, pos)
        offset_delta, pos = read_varint(payload, pos)
        key, pos = _read_bytes(payload, pos)
        value, pos = _read_bytes(payload, pos)
        count, pos = read_varint(payload, pos)
        if count < 0 or count > end - pos:
            raise CorruptRecordError(f"bad header count {count}")
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(count):
            name, pos = _read_bytes(payload, pos)
            if name is None:
                raise CorruptRecordError("null header key")
            header_value, pos = _read_bytes(payload, pos)
            try:
                headers.append((name.decode("utf-8"), header_value))
            except UnicodeDecodeError as exc:
                raise CorruptRecordError("header key is not UTF-8") from exc
        if pos != end:
            raise CorruptRecordError("record length does not match its fields")
        timestamp = header.max_timestamp if log_append_time else header.base_timestamp
        records.append(
            Record(
                offset=header.base_offset + offset_delta,
                timestamp=timestamp if log_append_time else timestamp + timestamp_delta,
                key=key,
                value=value,
                headers=tuple(headers),
            )
        )
    if pos != len(payload):
        raise CorruptRecordError("trailing bytes after the last record")
    return records


# --- building ------------------------------------------------------------------------------


def _encode_record(
    out: bytearray, record: SimpleRecord, *, offset_delta: int, timestamp_delta: int
) -> None:
    body = bytearray(b"\x00")  # attributes
    write_varint(body, timestamp_delta)
    write_varint(body, offset_delta)
    _write_bytes(body, record.key)
    _write_bytes(body, record.value)
    write_varint(body, len(record.headers))
    for name, value in record.headers:
        _write_bytes(body, name.encode("utf-8"))
        _write_bytes(body, value)
    write_varint(out, len(body))
    out += body


def build_batch(
    records: Sequence[SimpleRecord],
    *,
    base_offset: int = 0,
    base_timestamp: int | None = None,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """A complete, CRC-correct v2 batch of ``records`` with offset deltas 0..n-1.

    ``base_timestamp`` defaults to the smallest record timestamp (0 if none is given);
    max_timestamp is the largest record timestamp.
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    given = [r.timestamp_ms for r in records if r.timestamp_ms is not None]
    if base_timestamp is None:
        base_timestamp = min(given) if given else 0
    body = bytearray()
    max_timestamp = base_timestamp
    for delta, record in enumerate(records):
        timestamp = base_timestamp if record.timestamp_ms is None else record.timestamp_ms
        max_timestamp = max(max_timestamp, timestamp)
        _encode_record(body, record, offset_delta=delta, timestamp_delta=timestamp - base_timestamp)
    header = BatchHeader(
        base_offset=base_offset,
        batch_length=0,
        partition_leader_epoch=partition_leader_epoch,
        magic=MAGIC,
        crc=0,
        attributes=make_attributes(
            compression=compression,
            timestamp_type=timestamp_type,
            is_transactional=is_transactional,
            is_control=is_control,
        ),
        last_offset_delta=len(records) - 1,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=len(records),
    )
    return encode_batch(header, compress(bytes(body), compression))


def build_control_batch(
    *,
    producer_id: int,
    producer_epoch: int,
    control_type: int,
    coordinator_epoch: int,
    timestamp_ms: int,
) -> bytes:
    """A transaction marker (format in the module docstring), as Kafka's
    MemoryRecords.withEndTransactionMarker builds it: base_sequence -1, one record."""
    record = SimpleRecord(
        key=_CONTROL_KEY.pack(0, control_type),
        value=_MARKER_VALUE.pack(0, coordinator_epoch),
        timestamp_ms=timestamp_ms,
    )
    return build_batch(
        [record],
        base_timestamp=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )


def control_type(batch: bytes | bytearray | memoryview) -> int:
    """The type id (:data:`ABORT`, :data:`COMMIT`, ...) in the key of a control batch's
    record; CorruptRecordError if it has none."""
    records = decode_records(batch)
    key = records[0].key if len(records) == 1 else None
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptRecordError("a control batch needs one record with a 4-byte key")
    version, type_id = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key version {version}")
    return int(type_id)
