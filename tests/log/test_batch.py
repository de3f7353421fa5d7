"""Batch header parsing/validation and record decode/build round trips."""

from __future__ import annotations

import contextlib
import warnings
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.log import (
    ABORT,
    COMMIT,
    CorruptRecordError,
    Record,
    SimpleRecord,
    TimestampType,
    build_batch,
    control_type,
    decode_records,
    iter_batches,
    parse_header,
)
from riverbed.log.batch import (
    HEADER_SIZE,
    Compression,
    increment_sequence,
    patch_base_offset,
    patch_log_append_time,
    validate_batch,
)
from riverbed.log.record_codec import build_control_batch

optional_bytes = st.none() | st.binary(max_size=200)
simple_records = st.lists(
    st.builds(
        SimpleRecord,
        key=optional_bytes,
        value=optional_bytes,
        headers=st.lists(st.tuples(st.text(max_size=10), optional_bytes), max_size=3).map(tuple),
        timestamp_ms=st.none() | st.integers(min_value=0, max_value=2**41),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=150)
@given(
    records=simple_records,
    compression=st.sampled_from(Compression),
    base_offset=st.integers(min_value=0, max_value=2**40),
)
def test_build_validate_decode_round_trip(
    records: list[SimpleRecord], compression: Compression, base_offset: int
) -> None:
    batch = build_batch(records, base_offset=base_offset, compression=compression)
    header = validate_batch(batch)
    assert header.size == len(batch)
    assert header.compression is compression
    assert header.records_count == len(records)
    assert header.last_offset == base_offset + len(records) - 1
    decoded = decode_records(batch)
    base_ts = header.base_timestamp
    assert decoded == [
        Record(
            offset=base_offset + i,
            timestamp=base_ts if r.timestamp_ms is None else r.timestamp_ms,
            key=r.key,
            value=r.value,
            headers=r.headers,
        )
        for i, r in enumerate(records)
    ]
    assert header.max_timestamp == max(rec.timestamp for rec in decoded)


def test_header_fields_and_flags() -> None:
    batch = build_batch(
        [SimpleRecord(value=b"x", timestamp_ms=10)],
        base_offset=5,
        producer_id=42,
        producer_epoch=3,
        base_sequence=7,
        is_transactional=True,
        compression=Compression.ZSTD,
    )
    header = parse_header(batch)
    assert (header.base_offset, header.producer_id, header.producer_epoch) == (5, 42, 3)
    assert header.base_sequence == 7 and header.last_sequence == 7
    assert header.is_transactional and not header.is_control
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert header.compression is Compression.ZSTD


# base_offset (0-7) and partition_leader_epoch (12-15) are outside the CRC by design.
@pytest.mark.parametrize("position", [*range(8, 12), *range(16, HEADER_SIZE + 4)])
def test_every_flipped_byte_is_detected(position: int) -> None:
    batch = bytearray(build_batch([SimpleRecord(key=b"k", value=b"value")]))
    batch[position] ^= 0x40
    with pytest.raises(CorruptRecordError):
        validate_batch(batch)


def test_partition_leader_epoch_is_outside_the_crc() -> None:
    """Kafka's CRC starts at attributes: bytes 12-16 may change freely (except magic)."""
    batch = bytearray(build_batch([SimpleRecord(value=b"v")]))
    batch[12:16] = b"\x00\x00\x00\x07"
    assert validate_batch(batch).partition_leader_epoch == 7


def test_validate_rejects_wrong_length_count_and_codec() -> None:
    batch = build_batch([SimpleRecord(value=b"a"), SimpleRecord(value=b"b")])
    with pytest.raises(CorruptRecordError):
        validate_batch(batch + b"\x00")
    with pytest.raises(CorruptRecordError):
        validate_batch(batch[:-1])
    with pytest.raises(CorruptRecordError):
        validate_batch(batch[:30])
    broken = bytearray(batch)
    broken[60] = 5  # records_count 2 -> 5, CRC then also wrong; count checked first
    with pytest.raises(CorruptRecordError, match="records_count"):
        validate_batch(broken)
    broken = bytearray(batch)
    broken[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        validate_batch(broken)
    broken = bytearray(batch)
    broken[22] |= 0x07
    with pytest.raises(CorruptRecordError, match="codec"):
        validate_batch(broken)


def test_patches_keep_the_batch_valid() -> None:
    batch = build_batch([SimpleRecord(value=b"v", timestamp_ms=5)] * 3)
    header_bytes = bytearray(batch[:HEADER_SIZE])
    patch_base_offset(header_bytes, 1000)
    patch_log_append_time(header_bytes, batch[HEADER_SIZE:], timestamp_ms=99)
    patched = bytes(header_bytes) + batch[HEADER_SIZE:]
    header = validate_batch(patched)
    assert header.base_offset == 1000
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in decode_records(patched)] == [99, 99, 99]
    assert [r.offset for r in decode_records(patched)] == [1000, 1001, 1002]


def test_iter_batches_stops_at_partial_tail() -> None:
    a = build_batch([SimpleRecord(value=b"a")], base_offset=0)
    b = build_batch([SimpleRecord(value=b"bb")] * 2, base_offset=1)
    found = list(iter_batches(a + b + b[:-3]))
    assert [(pos, h.base_offset) for pos, h in found] == [(0, 0), (len(a), 1)]


def test_sequence_wraps_at_int32_max() -> None:
    assert increment_sequence(5, 3) == 8
    assert increment_sequence(2**31 - 1, 1) == 0
    assert increment_sequence(2**31 - 2, 3) == 1


def _kafka_python_records() -> ModuleType:
    """kafka-python's record module; importing it emits a DeprecationWarning (its own
    importlib.resources use), which pytest would turn into an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record import default_records
    return default_records


def _require_codec(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import codec
    # python-snappy is a dev dependency so that kafka-python can cross-check snappy too.
    assert name != "snappy" or codec.has_snappy(), "python-snappy is missing"


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_decodes_batches_built_by_kafka_python(codec: str) -> None:
    """Cross-check the framing of every codec against an independent client's encoder."""
    _require_codec(codec)
    kafka = _kafka_python_records()
    DefaultRecordBatch, DefaultRecordBatchBuilder = (
        kafka.DefaultRecordBatch,
        kafka.DefaultRecordBatchBuilder,
    )
    codec_id = {
        "none": DefaultRecordBatch.CODEC_NONE,
        "gzip": DefaultRecordBatch.CODEC_GZIP,
        "snappy": DefaultRecordBatch.CODEC_SNAPPY,
        "lz4": DefaultRecordBatch.CODEC_LZ4,
        "zstd": DefaultRecordBatch.CODEC_ZSTD,
    }[codec]
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec_id,
        is_transactional=False,
        producer_id=9,
        producer_epoch=1,
        base_sequence=0,
        batch_size=1 << 20,
    )
    for i in range(50):
        builder.append(i, timestamp=1000 + i, key=b"k%d" % i, value=b"v" * i, headers=[])
    batch = bytes(builder.build())
    header = validate_batch(batch)
    records = decode_records(batch)
    assert header.records_count == 50
    assert [r.value for r in records] == [b"v" * i for i in range(50)]
    assert [r.timestamp for r in records] == [1000 + i for i in range(50)]


@pytest.mark.parametrize("compression", list(Compression))
def test_kafka_python_reads_our_batches(compression: Compression) -> None:
    _require_codec(compression.name.lower())
    batch = build_batch(
        [SimpleRecord(key=b"k", value=b"v" * 100 + bytes([i])) for i in range(40)],
        compression=compression,
    )
    theirs = _kafka_python_records().DefaultRecordBatch(batch)
    assert theirs.validate_crc()
    assert [bytes(r.value) for r in theirs] == [b"v" * 100 + bytes([i]) for i in range(40)]


def test_raw_snappy_is_read_too() -> None:
    import cramjam

    from riverbed.log.compression import decompress

    raw = bytes(cramjam.snappy.compress_raw(b"hello world" * 10))
    assert decompress(raw, Compression.SNAPPY) == b"hello world" * 10


@given(st.binary(max_size=300))
def test_decode_garbage_raises_only_corrupt_record(data: bytes) -> None:
    with contextlib.suppress(CorruptRecordError):
        decode_records(data)


@pytest.mark.parametrize("type_id", [ABORT, COMMIT])
def test_control_batch_round_trip(type_id: int) -> None:
    marker = build_control_batch(
        producer_id=9,
        producer_epoch=3,
        control_type=type_id,
        coordinator_epoch=12,
        timestamp_ms=777,
    )
    header = validate_batch(marker)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 3, -1)
    assert (header.records_count, header.max_timestamp) == (1, 777)
    assert control_type(marker) == type_id
    (record,) = decode_records(marker)
    assert record.value == b"\x00\x00\x00\x00\x00\x0c"  # version 0, coordinator epoch 12


def test_control_type_needs_a_control_key() -> None:
    with pytest.raises(CorruptRecordError):
        control_type(build_batch([SimpleRecord(key=b"k", value=b"v")]))
    with pytest.raises(CorruptRecordError):  # a negative key version
        control_type(build_batch([SimpleRecord(key=b"\xff\xff\x00\x00")]))
