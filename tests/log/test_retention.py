"""Retention, DeleteRecords and the log start offset (riverbed.log.retention, Log)."""

from __future__ import annotations

from pathlib import Path

import pytest

from riverbed.log import (
    Log,
    OffsetOutOfRangeError,
    TopicConfig,
    delete_old_segments,
    delete_records,
)
from tests.support.log_files import FakeClock, batch, crash, offsets_in, open_log, read_all

HOUR_MS = 3_600_000


def _fill(log_dir: Path, clock: FakeClock, *, batches: int) -> None:
    """``batches`` batches of 3 records, one segment each, timestamps 1 hour apart."""
    log = open_log(log_dir, clock, segment_bytes=1)
    for i in range(batches):
        log.append(batch(3, tag=i, timestamp_ms=clock.now_ms - (batches - i) * HOUR_MS))
    log.close()


def _filled(log_dir: Path, clock: FakeClock, *, batches: int, **config: int) -> Log:
    """:func:`_fill`, then the log reopened with ``config``."""
    _fill(log_dir, clock, batches=batches)
    return open_log(log_dir, clock, **config)


def _bases(log: Log) -> list[int]:
    return [segment.base_offset for segment in log.segments]


def test_delete_records_moves_the_start_durably_and_drops_whole_segments(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _filled(tmp_path, clock, batches=4, segment_bytes=1)
    assert len(log.segments) == 4
    assert delete_records(log, 4) == 4  # inside the second segment [3, 6)
    assert log.log_start_offset == 4
    assert _bases(log) == [3, 6, 9]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, max_bytes=1000)
    assert offsets_in(log.read(4, max_bytes=10_000)) == [3, 6, 9]  # the batch holding 4
    assert delete_records(log, 2) == 4  # never moves back
    with pytest.raises(OffsetOutOfRangeError):
        delete_records(log, 13)
    crash(log)
    reopened = open_log(tmp_path, clock, segment_bytes=1)
    assert reopened.log_start_offset == 4
    assert delete_records(reopened, -1) == 12  # -1: the high watermark
    assert _bases(reopened) == [9]
    assert read_all(reopened) == b""
    reopened.close()
    assert open_log(tmp_path, clock).log_start_offset == 12


def test_deleted_segment_files_wait_for_file_delete_delay(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _filled(tmp_path, clock, batches=3, segment_bytes=1, file_delete_delay_ms=60_000)
    delete_records(log, 6)
    waiting = sorted(p.name for p in tmp_path.glob("*.deleted"))
    assert "00000000000000000000.log.deleted" in waiting
    assert "00000000000000000003.log.deleted" in waiting
    clock.now_ms += 59_999
    log.deleted_files.delete_expired(now_ms=clock.now_ms)
    assert list(tmp_path.glob("*.deleted"))
    clock.now_ms += 1
    log.deleted_files.delete_expired(now_ms=clock.now_ms)
    assert not list(tmp_path.glob("*.deleted"))
    log.close()


def test_a_crash_between_moving_the_start_and_deleting_segments(tmp_path: Path) -> None:
    clock = FakeClock()
    _fill(tmp_path, clock, batches=3)
    (tmp_path / "log-start-offset").write_text("0\n7\n")  # written, then the crash
    log = open_log(tmp_path, clock, segment_bytes=1)
    assert log.log_start_offset == 7
    assert _bases(log) == [6]
    assert not (tmp_path / "00000000000000000000.log").exists()
    log.close()


def test_leftover_deleted_files_are_removed_at_open(tmp_path: Path) -> None:
    clock = FakeClock()
    _fill(tmp_path, clock, batches=2)
    (tmp_path / "00000000000000000099.log.deleted").write_bytes(b"old")
    open_log(tmp_path, clock).close()
    assert not list(tmp_path.glob("*.deleted"))


def test_retention_by_time_uses_the_largest_timestamp(tmp_path: Path) -> None:
    clock = FakeClock()
    retention_ms = int(2.5 * HOUR_MS)  # segment i's records are 5-i hours old
    log = _filled(tmp_path, clock, batches=5, segment_bytes=1, retention_ms=retention_ms)
    assert delete_old_segments(log, now_ms=clock.now_ms) == 3
    assert log.log_start_offset == 9
    assert _bases(log) == [9, 12]
    assert delete_old_segments(log, now_ms=clock.now_ms) == 0
    log.close()


def test_retention_by_time_can_expire_the_active_segment(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _filled(tmp_path, clock, batches=2, retention_ms=60_000)
    assert delete_old_segments(log, now_ms=clock.now_ms) == 2
    assert log.log_start_offset == log.log_end_offset == 6
    assert _bases(log) == [6]
    assert log.append(batch(1)).base_offset == 6  # still writable
    log.close()


def test_an_empty_active_segment_is_never_deleted(tmp_path: Path) -> None:
    """An empty log, and a log whose only segment was just emptied by retention: nothing to
    delete (this raised IndexError and killed the broker's retention task)."""
    clock = FakeClock()
    log = open_log(tmp_path / "empty", clock, retention_ms=60_000)
    assert delete_old_segments(log, now_ms=clock.now_ms + 10 * HOUR_MS) == 0
    assert delete_old_segments(log, now_ms=clock.now_ms) == 0
    assert _bases(log) == [0]
    log.close()
    log = _filled(tmp_path / "full", clock, batches=2, retention_ms=60_000)
    assert delete_old_segments(log, now_ms=clock.now_ms) == 2  # rolled, then deleted
    assert delete_old_segments(log, now_ms=clock.now_ms + 10 * HOUR_MS) == 0  # empty active
    assert _bases(log) == [6]
    log.close()


def test_retention_by_bytes_deletes_while_the_rest_stays_over_the_limit(tmp_path: Path) -> None:
    """Kafka's rule: a segment goes only if the log is still at least retention.bytes
    without it, so the log ends between the limit and the limit plus one segment."""
    clock = FakeClock()
    log = _filled(tmp_path, clock, batches=5, segment_bytes=1)
    size = log.segments[0].size
    log.config = TopicConfig(segment_bytes=1, retention_bytes=2 * size + size // 2)
    assert delete_old_segments(log, now_ms=clock.now_ms) == 2
    assert _bases(log) == [6, 9, 12]
    assert log.log_start_offset == 6
    log.config = TopicConfig(segment_bytes=1, retention_bytes=2 * size)
    assert delete_old_segments(log, now_ms=clock.now_ms) == 1
    log.close()


def test_compact_only_logs_are_not_deleted_by_time_or_size(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _filled(tmp_path, clock, batches=3, segment_bytes=1)
    log.config = TopicConfig(
        segment_bytes=1, retention_ms=1, retention_bytes=0, cleanup_policy="compact"
    )
    assert delete_old_segments(log, now_ms=clock.now_ms) == 0
    log.config = TopicConfig(segment_bytes=1, retention_ms=1, cleanup_policy="compact,delete")
    assert delete_old_segments(log, now_ms=clock.now_ms) == 3
    log.close()


def test_timestamp_lookup_never_answers_below_the_start(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _filled(tmp_path, clock, batches=2, segment_bytes=1)
    delete_records(log, 4)
    found = log.offset_for_timestamp(0)
    assert found is not None and found[0] == 4
    log.close()
