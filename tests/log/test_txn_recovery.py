"""Transactions after a kill -9: damage the txn indexes and markers on purpose, reopen, and
check the LSO, the ongoing transactions and the aborted list against the batches."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from riverbed.log import AbortedTxn, Log
from tests.support.log_files import batch, crash, open_log, overlapping, read_all, txn_state_of

A, B, C = 100, 200, 300


def _txn(log: Log, producer_id: int, seq: int, n: int = 2) -> None:
    log.append(
        batch(
            n,
            tag=seq,
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=seq,
            is_transactional=True,
        )
    )


def _assert_consistent(log: Log) -> tuple[dict[int, int], list[AbortedTxn]]:
    """The log's transaction state is what its batches say."""
    ongoing, aborted = txn_state_of(read_all(log))
    assert log.ongoing_transactions() == ongoing
    assert log.last_stable_offset == min(ongoing.values(), default=log.high_watermark)
    end = log.log_end_offset
    for start in range(0, end + 1, max(end // 25, 1)):
        assert log.aborted_transactions(start, end) == overlapping(aborted, start, end)
        assert log.aborted_transactions(start, start + 3) == overlapping(aborted, start, start + 3)
    return ongoing, aborted


def _three_transactions(directory: Path, **config: int) -> Log:
    """A aborted, B committed, C open; A's abort is the last batch."""
    log = open_log(directory, **config)
    _txn(log, A, 0)  # 0-1
    _txn(log, B, 0)  # 2-3
    _txn(log, C, 0)  # 4-5
    log.append(batch(3))  # 6-8
    _txn(log, A, 2)  # 9-10
    log.append_marker(producer_id=B, producer_epoch=0, commit=True)  # 11
    log.append_marker(producer_id=A, producer_epoch=0, commit=False)  # 12
    return log


def test_crash_after_an_abort_keeps_everything(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    crash(_three_transactions(directory))
    log = open_log(directory)
    ongoing, aborted = _assert_consistent(log)
    assert ongoing == {C: 4}
    assert aborted == [
        AbortedTxn(producer_id=A, first_offset=0, last_offset=12, last_stable_offset=4)
    ]
    assert log.last_stable_offset == 4


@pytest.mark.parametrize("damage", ["delete", "empty", "torn", "garbage", "stale"])
def test_damaged_txn_index_of_the_active_segment_is_rebuilt(tmp_path: Path, damage: str) -> None:
    """A kill -9 between the marker and its index entry, or in the middle of the entry."""
    directory = tmp_path / "t-0"
    crash(_three_transactions(directory))
    (path,) = directory.glob("*.txnindex")
    data = path.read_bytes()
    assert len(data) == 34
    if damage == "delete":
        path.unlink()
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "torn":
        path.write_bytes(data[:20])
    elif damage == "garbage":
        path.write_bytes(os.urandom(34 * 3 + 5))
    else:  # an entry for an abort that is not in the log
        path.write_bytes(data + data)
    log = open_log(directory)
    _, aborted = _assert_consistent(log)
    assert len(aborted) == 1
    assert path.read_bytes() == data
    log.append_marker(producer_id=C, producer_epoch=0, commit=False)
    _assert_consistent(log)
    crash(log)
    _assert_consistent(open_log(directory))


def test_torn_abort_marker_leaves_the_transaction_open(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = _three_transactions(directory)
    marker_size = len(log.read(12, max_bytes=1 << 20))
    crash(log)
    (segment,) = directory.glob("*.log")
    size = segment.stat().st_size
    for cut in (1, marker_size // 2, marker_size - 1):
        os.truncate(segment, size - cut)
        log = open_log(directory)
        assert log.log_end_offset == 12
        ongoing, aborted = _assert_consistent(log)
        assert ongoing == {A: 0, C: 4} and aborted == []
        assert log.last_stable_offset == 0
        assert not list(directory.glob("*.txnindex")), "the entry of the torn marker is gone"
        crash(log)
    log = open_log(directory)
    log.append_marker(producer_id=A, producer_epoch=0, commit=False)  # the coordinator retries
    _, aborted = _assert_consistent(log)
    assert [(t.first_offset, t.last_offset) for t in aborted] == [(0, 12)]


def test_txn_indexes_below_the_recovery_point_are_trusted_and_lazy(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, segment_bytes=400)
    for i in range(6):
        _txn(log, A + i, 0)
        log.append(batch(2))
        log.append_marker(producer_id=A + i, producer_epoch=0, commit=i % 2 == 0)
    assert len(log.segments) > 3
    _txn(log, C, 0)
    log.flush()
    _, aborted = txn_state_of(read_all(log))
    with_index = {p.name for p in directory.glob("*.txnindex")}
    assert len(with_index) >= 2
    crash(log)
    log = open_log(directory, segment_bytes=400)
    assert all(s._fd is None and s.txn_index._entries is None for s in log.segments[:-1])
    assert _assert_consistent(log) == ({C: log.ongoing_transactions()[C]}, aborted)
    # a torn trailing entry in an old index (never written so, but must not hurt) is ignored
    crash(log)
    oldest = directory / min(with_index)
    oldest.write_bytes(oldest.read_bytes() + b"\x00\x00\x01")
    log = open_log(directory, segment_bytes=400)
    assert _assert_consistent(log)[1] == aborted


def test_recovery_replays_markers_below_the_scan_without_snapshots(tmp_path: Path) -> None:
    """Producer state rebuilt from headers alone: markers in segments below the recovery
    point complete transactions even though their type is not read there."""
    directory = tmp_path / "t-0"
    log = open_log(directory, segment_bytes=400)
    _txn(log, A, 0)
    _txn(log, B, 0)
    for i in range(8):
        log.append(batch(2, tag=i))
    log.append_marker(producer_id=A, producer_epoch=0, commit=False)
    for i in range(8):
        log.append(batch(2, tag=i))
    _txn(log, C, 0)
    log.flush()
    assert len(log.segments) > 3
    crash(log)
    for path in directory.glob("*.snapshot"):
        path.unlink()
    log = open_log(directory, segment_bytes=400)
    ongoing, aborted = _assert_consistent(log)
    assert set(ongoing) == {B, C} and [t.producer_id for t in aborted] == [A]


def test_unflushed_rolled_segments_get_their_txn_indexes_rebuilt(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, segment_bytes=300)
    log.flush()
    for i in range(5):
        _txn(log, A + i, 0)
        log.append(batch(3))
        log.append_marker(producer_id=A + i, producer_epoch=0, commit=False)
    assert len(log.segments) > 3
    crash(log)  # nothing flushed since the start: every segment is scanned
    for path in directory.glob("*.txnindex"):
        path.unlink()
    log = open_log(directory, segment_bytes=300)
    _, aborted = _assert_consistent(log)
    assert len(aborted) == 5
    assert len(list(directory.glob("*.txnindex"))) >= 2


def test_clean_shutdown_keeps_txn_indexes_and_open_transactions(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = _three_transactions(directory, segment_bytes=400)
    before = _assert_consistent(log)
    log.close()
    log = open_log(directory, segment_bytes=400)
    assert _assert_consistent(log) == before
    log.append_marker(producer_id=C, producer_epoch=0, commit=False)
    log.close()
    log = open_log(directory, segment_bytes=400)
    assert len(_assert_consistent(log)[1]) == 2
    assert sum(p.stat().st_size for p in directory.glob("*.txnindex")) == 2 * 34


def test_stale_txn_index_without_its_log_is_removed(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    crash(_three_transactions(directory))
    orphan = directory / f"{999:020d}.txnindex"
    orphan.write_bytes(b"x" * 34)
    _assert_consistent(open_log(directory))
    assert not orphan.exists()


def test_recovery_truncation_deletes_later_segments_txn_indexes(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, segment_bytes=300)
    log.flush()
    _txn(log, A, 0)
    log.append(batch(3))
    log.roll()
    log.append(batch(3))
    log.roll()
    log.append_marker(producer_id=A, producer_epoch=0, commit=False)
    bases = [s.base_offset for s in log.segments]
    crash(log)
    middle = directory / f"{bases[1]:020d}.log"
    data = bytearray(middle.read_bytes())
    data[-3] ^= 0xFF  # the middle segment's last batch is damaged: all after it goes
    middle.write_bytes(bytes(data))
    log = open_log(directory, segment_bytes=300)
    assert [s.base_offset for s in log.segments] == bases[:2]
    assert not list(directory.glob("*.txnindex"))
    ongoing, aborted = _assert_consistent(log)
    assert ongoing == {A: 0} and aborted == []


def test_append_after_a_damaged_tail_of_a_trusted_txn_index(tmp_path: Path) -> None:
    """After a clean shutdown the active segment's index is trusted; an entry appended to it
    replaces whatever follows its last valid entry."""
    directory = tmp_path / "t-0"
    _three_transactions(directory).close()
    (path,) = directory.glob("*.txnindex")
    with open(path, "ab") as f:
        f.write(b"\xff" * 34 + b"\x00" * 10)  # an entry of an unknown version, then a torn one
    log = open_log(directory)
    log.append_marker(producer_id=C, producer_epoch=0, commit=False)
    assert path.stat().st_size == 2 * 34
    assert len(_assert_consistent(log)[1]) == 2
    log.close()
    assert len(_assert_consistent(open_log(directory))[1]) == 2
