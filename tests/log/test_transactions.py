"""Transactions in the log: begin, commit, abort, the LSO and the aborted-transaction index."""

from __future__ import annotations

from pathlib import Path

import pytest

from riverbed.log import (
    ABORT,
    COMMIT,
    AbortedTxn,
    AppendResult,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    Log,
    OutOfOrderSequenceError,
    TimestampType,
    TopicConfig,
    control_type,
    decode_records,
)
from riverbed.log.batch import validate_batch
from riverbed.log.record_codec import build_control_batch
from tests.support.log_files import (
    FakeClock,
    batch,
    offsets_in,
    open_log,
    overlapping,
    read_all,
    txn_state_of,
)

A, B, C = 100, 200, 300


class Producer:
    """A transactional producer's sequence numbers (epoch 0 unless bumped)."""

    def __init__(self, log: Log, producer_id: int, *, epoch: int = 0) -> None:
        self.log, self.producer_id, self.epoch, self.seq = log, producer_id, epoch, 0

    def send(self, n: int = 2, *, transactional: bool = True) -> AppendResult:
        result = self.log.append(
            batch(
                n,
                tag=self.producer_id,
                producer_id=self.producer_id,
                producer_epoch=self.epoch,
                base_sequence=self.seq,
                is_transactional=transactional,
            )
        )
        self.seq += n
        return result

    def end(self, *, commit: bool) -> AppendResult:
        return self.log.append_marker(
            producer_id=self.producer_id, producer_epoch=self.epoch, commit=commit
        )


def test_commit_and_abort_across_producers(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    a, b = Producer(log, A), Producer(log, B)
    assert log.last_stable_offset == 0 and log.ongoing_transactions() == {}
    a.send()  # 0-1
    b.send()  # 2-3
    log.append(batch(1))  # 4: not transactional, no producer id
    assert log.ongoing_transactions() == {A: 0, B: 2}
    assert log.has_ongoing_transaction(A) and not log.has_ongoing_transaction(C)
    assert log.last_stable_offset == 0
    assert log.high_watermark == 5
    committed = a.end(commit=True)
    assert (committed.base_offset, committed.last_offset) == (5, 5)
    assert log.last_stable_offset == 2
    aborted = b.end(commit=False)
    assert aborted.base_offset == 6
    assert log.last_stable_offset == log.high_watermark == 7
    assert log.ongoing_transactions() == {}
    expected = [AbortedTxn(producer_id=B, first_offset=2, last_offset=6, last_stable_offset=7)]
    assert log.aborted_transactions(0, 7) == expected
    assert txn_state_of(read_all(log)) == ({}, expected)


def test_last_stable_offset_with_interleaved_transactions(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    a, b, c = Producer(log, A), Producer(log, B), Producer(log, C)
    a.send()  # 0-1
    b.send()  # 2-3
    a.send()  # 4-5: same transaction
    b.end(commit=True)  # 6
    assert log.last_stable_offset == 0, "A's transaction is older"
    c.send()  # 7-8
    a.end(commit=False)  # 9
    assert log.last_stable_offset == 7
    assert log.aborted_transactions(0, 100) == [
        AbortedTxn(producer_id=A, first_offset=0, last_offset=9, last_stable_offset=7)
    ]
    a.send()  # 10-11: a new transaction of A
    c.end(commit=False)  # 12
    assert log.last_stable_offset == 10
    a.end(commit=True)  # 13
    assert log.last_stable_offset == log.high_watermark == 14
    ongoing, aborted = txn_state_of(read_all(log))
    assert ongoing == {} and log.aborted_transactions(0, 14) == aborted
    assert [t.last_stable_offset for t in aborted] == [7, 10]


def test_read_committed_reads_below_the_last_stable_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(batch(2))  # 0-1
    Producer(log, A).send()  # 2-3, open
    log.append(batch(2))  # 4-5
    assert offsets_in(log.read(0, max_bytes=1 << 20, max_offset=log.last_stable_offset)) == [0]
    assert log.read(2, max_bytes=1 << 20, max_offset=log.last_stable_offset) == b""


def test_aborted_transactions_ranges(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    producers = [Producer(log, pid) for pid in (A, B, C)]
    script = [(0, "send"), (1, "send"), (0, "abort"), (2, "send"), (1, "send"), (2, "abort")]
    script += [(1, "abort"), (0, "send"), (0, "commit"), (1, "send"), (1, "abort")]
    for i, action in script:
        if action == "send":
            producers[i].send()
        else:
            producers[i].end(commit=action == "commit")
    _, aborted = txn_state_of(read_all(log))
    assert len(aborted) == 4
    end = log.log_end_offset
    for start in range(end + 1):
        for upper in range(start, end + 2):
            assert log.aborted_transactions(start, upper) == overlapping(aborted, start, upper)


def test_transaction_spanning_segment_rolls(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, segment_bytes=400)
    a, b = Producer(log, A), Producer(log, B)
    a.send()  # begins in segment 0
    for _ in range(10):
        b.send(transactional=False)
    assert len(log.segments) >= 3
    marker = a.end(commit=False)
    holder = log.segments[-1]
    assert holder.base_offset <= marker.base_offset
    expected = [
        AbortedTxn(
            producer_id=A,
            first_offset=0,
            last_offset=marker.base_offset,
            last_stable_offset=marker.base_offset + 1,
        )
    ]
    assert log.aborted_transactions(0, 1) == expected, "found from segment 0's offsets"
    assert log.aborted_transactions(marker.base_offset, marker.base_offset + 1) == expected
    assert log.aborted_transactions(marker.base_offset + 1, 10**6) == []
    assert sorted(p.name for p in directory.glob("*.txnindex")) == [
        f"{holder.base_offset:020d}.txnindex"
    ]
    assert holder.txn_index_path.stat().st_size == 34
    # an abort in a later segment, for a transaction that began before the first one ended
    b.seq = 0
    b.epoch = 1
    b.send()
    log.roll()
    a.send()
    log.roll()
    b.end(commit=False)
    log.roll()
    a.end(commit=False)
    _, aborted = txn_state_of(read_all(log))
    for start in range(log.log_end_offset + 1):
        assert log.aborted_transactions(start, log.log_end_offset) == overlapping(
            aborted, start, log.log_end_offset
        )


def test_non_transactional_batch_during_a_transaction_is_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    a = Producer(log, A)
    a.send(transactional=False)  # idempotent, no transaction: fine
    a.send()  # a transactional batch from a non-transactional entry begins one
    assert log.ongoing_transactions() == {A: 2}
    size = len(read_all(log))
    with pytest.raises(InvalidTxnStateError):
        a.send(transactional=False)
    assert len(read_all(log)) == size and log.log_end_offset == 4
    a.seq += 2  # a gap: reported as such, before the transaction state
    with pytest.raises(OutOfOrderSequenceError):
        a.send(transactional=False)
    a.seq -= 2
    a.send()  # the transaction goes on
    assert log.ongoing_transactions() == {A: 2}
    a.end(commit=True)
    a.send(transactional=False)
    assert log.ongoing_transactions() == {}


def test_duplicate_transactional_batch_is_not_written_again(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    a = Producer(log, A)
    first = a.send()
    a.seq = 0
    again = a.send()
    assert again.duplicate and again.base_offset == first.base_offset
    assert log.log_end_offset == 2 and log.ongoing_transactions() == {A: 0}


def test_markers_and_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    a = Producer(log, A, epoch=3)
    a.send()
    with pytest.raises(InvalidProducerEpochError):
        log.append_marker(producer_id=A, producer_epoch=2, commit=True)
    assert log.log_end_offset == 2 and log.has_ongoing_transaction(A)
    # the coordinator fences the producer: abort with the next epoch
    log.append_marker(producer_id=A, producer_epoch=4, commit=False)
    assert log.producer_epoch(A) == 4 and not log.has_ongoing_transaction(A)
    assert [t.producer_id for t in log.aborted_transactions(0, 3)] == [A]
    with pytest.raises(InvalidProducerEpochError):
        a.send()  # the old epoch is fenced
    a.epoch, a.seq = 4, 0
    a.send()
    assert log.ongoing_transactions() == {A: 3}


def test_marker_without_a_transaction_is_written_and_completes_nothing(tmp_path: Path) -> None:
    clock = FakeClock(1_234_567)
    log = open_log(tmp_path / "t-0", clock)
    log.append(batch(2))
    result = log.append_marker(producer_id=B, producer_epoch=0, commit=False)
    assert (result.base_offset, result.last_offset, result.duplicate) == (2, 2, False)
    assert log.log_end_offset == log.last_stable_offset == 3
    assert log.aborted_transactions(0, 3) == []
    assert log.producer_epoch(B) == 0
    assert not list((tmp_path / "t-0").glob("*.txnindex"))
    stored = log.read(2, max_bytes=1 << 20)
    header = validate_batch(stored)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (B, 0, -1)
    assert header.max_timestamp == 1_234_567
    assert control_type(stored) == ABORT


def test_marker_bytes(tmp_path: Path) -> None:
    config = TopicConfig(message_timestamp_type=TimestampType.LOG_APPEND_TIME)
    log = Log.open(tmp_path / "t-0", config=config, clock=FakeClock(99))
    Producer(log, A).send()
    log.append_marker(
        producer_id=A, producer_epoch=0, commit=True, coordinator_epoch=7, timestamp_ms=5
    )
    stored = log.read(2, max_bytes=1 << 20)
    (record,) = decode_records(stored)
    assert record.key == b"\x00\x00\x00\x01" and control_type(stored) == COMMIT
    assert record.value == b"\x00\x00\x00\x00\x00\x07"  # version 0, coordinator epoch 7
    assert validate_batch(stored).max_timestamp == 99, "LogAppendTime stamps markers too"


def test_control_batch_from_a_client_is_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    marker = build_control_batch(
        producer_id=A, producer_epoch=0, control_type=COMMIT, coordinator_epoch=0, timestamp_ms=1
    )
    with pytest.raises(InvalidRecordError):
        log.append(marker)
    assert log.log_end_offset == 0 and log.segments[-1].size == 0
