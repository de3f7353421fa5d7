"""Log append/read/timestamp behaviour against real files."""

from __future__ import annotations

from pathlib import Path

import pytest

from riverbed.log import (
    CorruptRecordError,
    Log,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    TimestampType,
    TopicConfig,
    decode_records,
    iter_batches,
)
from riverbed.log.batch import validate_batch
from tests.support.log_files import FakeClock, batch, offsets_in, open_log, read_all


def test_append_assigns_dense_offsets_and_read_returns_stored_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    sent = [batch(3, tag=i) for i in range(5)]
    results = [log.append(b) for b in sent]
    assert [(r.base_offset, r.last_offset) for r in results] == [
        (3 * i, 3 * i + 2) for i in range(5)
    ]
    assert all(not r.duplicate and r.log_append_time_ms == -1 for r in results)
    assert log.log_end_offset == log.high_watermark == 15
    data = read_all(log)
    assert offsets_in(data) == [0, 3, 6, 9, 12]
    for (pos, header), original in zip(iter_batches(data), sent, strict=True):
        stored = data[pos : pos + header.size]
        assert stored[8:] == original[8:]  # only base_offset differs
        validate_batch(stored)


def test_read_starts_at_the_batch_holding_the_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    for i in range(4):
        log.append(batch(5, tag=i))
    assert offsets_in(log.read(7, max_bytes=1 << 20)) == [5, 10, 15]
    assert offsets_in(log.read(10, max_bytes=1 << 20)) == [10, 15]
    assert log.read(20, max_bytes=1 << 20) == b""


def test_read_bounds(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    sizes = [len(b) for b in (batch(1, tag=0, value_bytes=500), batch(1, tag=1))]
    log.append(batch(1, tag=0, value_bytes=500))
    log.append(batch(1, tag=1))
    log.append(batch(1, tag=2))
    # the first batch is returned whole even when larger than max_bytes
    assert offsets_in(log.read(0, max_bytes=10)) == [0]
    # no partial batch at the end
    assert offsets_in(log.read(0, max_bytes=sizes[0] + sizes[1] - 1)) == [0]
    assert offsets_in(log.read(0, max_bytes=sizes[0] + sizes[1])) == [0, 1]
    assert offsets_in(log.read(0, max_bytes=1 << 20, max_offset=2)) == [0, 1]
    assert log.read(1, max_bytes=1 << 20, max_offset=1) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, max_bytes=100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, max_bytes=100)


def test_reads_continue_across_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=300, index_interval_bytes=0)
    for i in range(30):
        log.append(batch(2, tag=i))
    assert len(log.segments) > 5
    assert offsets_in(read_all(log)) == list(range(0, 60, 2))
    for offset in range(60):
        got = offsets_in(log.read(offset, max_bytes=250))
        assert got and got[0] <= offset < got[0] + 2
    files = sorted(p.name for p in (tmp_path / "t-0").iterdir() if p.suffix == ".log")
    assert files[0] == "00000000000000000000.log"


def test_rejects_bad_batches_and_writes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", max_message_bytes=300)
    good = bytearray(batch(1))
    good[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append(bytes(good))
    with pytest.raises(RecordTooLargeError):
        log.append(batch(1, value_bytes=400))
    with pytest.raises(CorruptRecordError):
        log.append(batch(1) + batch(1))  # exactly one batch per append
    assert log.log_end_offset == 0
    assert log.segments[-1].size == 0


def test_accepts_bytearray_and_memoryview(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    assert log.append(bytearray(batch(2))).base_offset == 0
    assert log.append(memoryview(batch(2))).base_offset == 2
    assert offsets_in(read_all(log)) == [0, 2]


def test_log_append_time_sets_timestamps_and_crc(tmp_path: Path) -> None:
    clock = FakeClock(5_000_000)
    config = TopicConfig(message_timestamp_type=TimestampType.LOG_APPEND_TIME)
    log = Log.open(tmp_path / "t-0", config=config, clock=clock)
    result = log.append(batch(3, timestamp_ms=7))
    assert result.log_append_time_ms == 5_000_000
    stored = read_all(log)
    header = validate_batch(stored)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == 5_000_000
    assert [r.timestamp for r in decode_records(stored)] == [5_000_000] * 3


def test_roll_by_age_uses_the_clock(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", clock, segment_ms=1000)
    log.append(batch(1))
    clock.now_ms += 500
    log.append(batch(1))
    assert len(log.segments) == 1
    clock.now_ms += 501
    log.append(batch(1))
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_offset_for_timestamp_and_max_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=400, index_interval_bytes=0)
    assert log.offset_for_timestamp(0) is None
    assert log.max_timestamp_offset() is None
    # batch i holds records with timestamps 100*i .. 100*i+3; one batch is out of order
    stamps = [0, 100, 200, 900, 300, 400, 500]
    for i, ts in enumerate(stamps):
        log.append(batch(4, tag=i, timestamp_ms=ts))
    assert len(log.segments) > 2
    assert log.offset_for_timestamp(0) == (0, 0)
    assert log.offset_for_timestamp(102) == (6, 102)
    assert log.offset_for_timestamp(104) == (8, 200)
    assert log.offset_for_timestamp(250) == (12, 900)  # first record in offset order
    assert log.offset_for_timestamp(903) == (15, 903)
    assert log.offset_for_timestamp(904) is None
    assert log.max_timestamp_offset() == (15, 903)
    log.close()
    reopened = open_log(tmp_path / "t-0", segment_bytes=400, index_interval_bytes=0)
    assert reopened.offset_for_timestamp(250) == (12, 900)
    assert reopened.max_timestamp_offset() == (15, 903)


def test_clean_reopen_restores_everything(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=500)
    for i in range(20):
        log.append(batch(2, tag=i))
    before = read_all(log)
    log.close()
    reopened = open_log(tmp_path / "t-0", segment_bytes=500)
    assert reopened.log_end_offset == 40
    assert read_all(reopened) == before
    assert reopened.append(batch(1)).base_offset == 40
    assert not (tmp_path / "t-0" / "clean-shutdown").exists()


def test_flush_reports_flushed_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=300)
    assert log.flushed_offset == 0
    for i in range(10):
        log.append(batch(2, tag=i))
    assert log.flushed_offset < log.log_end_offset
    assert log.flush() == log.log_end_offset == log.flushed_offset == 20
    base = log.segments[-1].base_offset
    assert (tmp_path / "t-0" / "recovery-point").read_text() == f"0\n{base}\n"


def test_flush_after_close_or_delete_is_a_no_op(tmp_path: Path) -> None:
    log = open_log(tmp_path / "a-0")
    log.append(batch(2))
    log.close()
    assert log.flush() == 2
    doomed = open_log(tmp_path / "b-0")
    doomed.append(batch(3))
    doomed.delete()
    assert not (tmp_path / "b-0").exists()
    assert doomed.flush() == 0


def test_read_records_are_file_regions_that_outlive_the_segment_files(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=300, index_interval_bytes=0)
    for i in range(30):
        log.append(batch(2, tag=i))
    expected = log.read(10, max_bytes=1000)
    records = log.read_records(10, max_bytes=1000)
    assert len(records) == len(expected)
    assert len(records.regions) > 1, "the read spans segments"
    log.delete()  # files unlinked, the log's descriptors closed
    assert records.read() == expected, "the regions hold their own descriptors"
    records.close()
    assert all(region.file.closed for region in records.regions)


def test_read_records_cut_at_the_last_whole_batch_within_max_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", index_interval_bytes=4096)
    for i in range(200):
        log.append(batch(50, tag=i, value_bytes=100))  # ~5.5 KB batches
    with log.read_records(0, max_bytes=10**9) as everything:
        full = everything.read()
    sizes = [header.size for _, header in iter_batches(full)]
    assert len(sizes) == 200
    for max_bytes in (1, 5000, 5600, 100_000, 333_333, sum(sizes) - 1):
        fitting, total = 0, 0
        while fitting < len(sizes) and total + sizes[fitting] <= max_bytes:
            total += sizes[fitting]
            fitting += 1
        expected = full[: total if fitting else sizes[0]]  # at least the first batch, whole
        with log.read_records(0, max_bytes=max_bytes) as records:
            assert records.read() == expected, max_bytes
