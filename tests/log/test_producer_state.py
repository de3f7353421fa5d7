"""Idempotent and transactional producer rules, snapshots, and that the state survives
restarts."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import crc32c
import pytest

from riverbed.log import (
    ABORT,
    InvalidProducerEpochError,
    Log,
    OutOfOrderSequenceError,
    parse_header,
)
from riverbed.log.producer_state import CompletedTxn, ProducerStateManager
from riverbed.log.record_codec import build_control_batch
from tests.support.log_files import batch, crash, open_log, read_all

PID = 4000


def produce(log: Log, seq: int, *, n: int = 2, epoch: int = 0, pid: int = PID, tag: int = 0):  # type: ignore[no-untyped-def]
    return log.append(batch(n, tag=tag, producer_id=pid, producer_epoch=epoch, base_sequence=seq))


def test_duplicates_get_the_original_offsets_and_nothing_is_written(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    first = [produce(log, seq) for seq in range(0, 12, 2)]  # 6 batches, seq 0..11
    size = len(read_all(log))
    for original, seq in zip(first[1:], range(2, 12, 2), strict=True):  # the last 5 retained
        again = produce(log, seq)
        assert again.duplicate
        assert (again.base_offset, again.last_offset) == (
            original.base_offset,
            original.last_offset,
        )
    assert len(read_all(log)) == size
    with pytest.raises(OutOfOrderSequenceError):  # older than the retained window
        produce(log, 0)
    assert produce(log, 12).base_offset == 12


def test_sequence_gap_and_epoch_rules(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    produce(log, 0, epoch=3)
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 5, epoch=3)
    with pytest.raises(InvalidProducerEpochError):
        produce(log, 2, epoch=2)
    with pytest.raises(OutOfOrderSequenceError):  # a new epoch starts at 0
        produce(log, 2, epoch=4)
    produce(log, 0, epoch=4)
    assert log.producer_epoch(PID) == 4
    assert log.producer_epoch(PID + 1) is None
    produce(log, 2, epoch=4)


def test_unknown_producer_is_accepted_at_any_sequence(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    assert not produce(log, 777).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 777 + 5)
    produce(log, 779)


def test_sequences_wrap_at_int32_max(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    produce(log, 2**31 - 2, n=2)  # covers 2**31-2, 2**31-1
    produce(log, 0, n=2)
    assert produce(log, 0, n=2).duplicate


def test_non_idempotent_batches_are_not_checked(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(batch(1))
    assert not log.append(batch(1)).duplicate
    assert log.log_end_offset == 2


@pytest.mark.parametrize("shutdown", ["clean", "crash"])
def test_state_survives_restart(tmp_path: Path, shutdown: str) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=400)
    results = [produce(log, seq, tag=seq) for seq in range(0, 40, 2)]
    produce(log, 0, pid=PID + 1, epoch=7)
    assert len(log.segments) > 3
    if shutdown == "clean":
        log.close()
    else:
        log.flush()
        log.segments[-1].close()
    log = open_log(tmp_path / "t-0", segment_bytes=400)
    again = produce(log, 38)
    assert again.duplicate and again.base_offset == results[-1].base_offset
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 50)
    assert log.producer_epoch(PID + 1) == 7
    with pytest.raises(InvalidProducerEpochError):
        produce(log, 2, pid=PID + 1, epoch=6)
    assert produce(log, 40).base_offset == 42


def test_state_is_rebuilt_without_snapshots(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=400)
    for seq in range(0, 40, 2):
        produce(log, seq)
    log.flush()
    log.segments[-1].close()
    for path in (tmp_path / "t-0").glob("*.snapshot"):
        path.write_bytes(b"garbage")
    log = open_log(tmp_path / "t-0", segment_bytes=400)
    assert produce(log, 38).duplicate
    assert produce(log, 40).base_offset == 40


def _state_with_transactions() -> ProducerStateManager:
    state = ProducerStateManager()
    for pid, base, transactional in [(1, 0, True), (2, 2, False), (3, 4, True), (4, 6, True)]:
        sent = batch(
            2,
            producer_id=pid,
            producer_epoch=5,
            base_sequence=0,
            is_transactional=transactional,
            base_offset=base,
        )
        state.update(parse_header(sent))
    marker = build_control_batch(
        producer_id=3, producer_epoch=5, control_type=ABORT, coordinator_epoch=0, timestamp_ms=0
    )
    completed = state.update(dataclasses.replace(parse_header(marker), base_offset=8))
    assert completed == CompletedTxn(producer_id=3, first_offset=4, last_offset=8)
    return state


def test_snapshot_v2_keeps_ongoing_transactions() -> None:
    state = _state_with_transactions()
    assert state.ongoing_transactions() == {1: 0, 4: 6}
    decoded = ProducerStateManager.decode(state.encode())
    assert decoded is not None
    assert decoded.ongoing_transactions() == {1: 0, 4: 6}
    assert decoded.first_unstable_offset() == 0
    assert decoded.entries == state.entries
    assert struct.unpack_from(">h", state.encode(), 4) == (2,)


def test_snapshot_v1_loads_without_transactions() -> None:
    body = struct.pack(">i", 2)
    body += struct.pack(">qhb", 7, 3, 1) + struct.pack(">iiqqq", 0, 4, 10, 14, 1234)
    body += struct.pack(">qhb", 8, 0, 0)
    v1 = b"RBPS" + struct.pack(">hI", 1, crc32c.crc32c(body)) + body
    state = ProducerStateManager.decode(v1)
    assert state is not None
    assert state.ongoing_transactions() == {} and state.first_unstable_offset() is None
    assert state.epoch(7) == 3 and state.epoch(8) == 0
    entry = state.entries[7]
    assert entry.current_txn_first_offset is None
    assert [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in entry.batches] == [
        (0, 4, 10, 14)
    ]
    assert ProducerStateManager.decode(v1[:-1]) is None  # still checked
    damaged = bytearray(_state_with_transactions().encode())
    damaged[-1] ^= 1
    assert ProducerStateManager.decode(bytes(damaged)) is None


def test_snapshot_with_transactions_in_any_order_finds_the_oldest() -> None:
    state = _state_with_transactions()
    entries = dict(reversed(list(state.entries.items())))  # encode the newest first
    state.entries = entries
    decoded = ProducerStateManager.decode(state.encode())
    assert decoded is not None and list(decoded.ongoing_transactions().items()) == [(1, 0), (4, 6)]
    assert decoded.first_unstable_offset() == 0


@pytest.mark.parametrize("shutdown", ["clean", "crash"])
def test_ongoing_transactions_survive_restart(tmp_path: Path, shutdown: str) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=400)
    log.append(batch(2, producer_id=PID, producer_epoch=0, base_sequence=0, is_transactional=True))
    for seq in range(0, 20, 2):
        produce(log, seq, pid=PID + 1)
    log.append(
        batch(2, producer_id=PID + 2, producer_epoch=0, base_sequence=0, is_transactional=True)
    )
    assert len(log.segments) > 2
    if shutdown == "clean":
        log.close()
    else:
        log.flush()  # the transaction's start is below the recovery point: only in snapshots
        crash(log)
    log = open_log(tmp_path / "t-0", segment_bytes=400)
    assert log.ongoing_transactions() == {PID: 0, PID + 2: 22}
    assert log.last_stable_offset == 0
    log.append_marker(producer_id=PID, producer_epoch=0, commit=False)
    assert log.last_stable_offset == 22
    assert [(t.first_offset, t.last_offset) for t in log.aborted_transactions(0, 25)] == [(0, 24)]


def test_batches_without_a_sequence_are_never_duplicates_nor_out_of_order(
    tmp_path: Path,
) -> None:
    """The broker's own transactional batches (TxnOffsetCommit) carry sequence -1: each one
    is written (Kafka skips sequence checks for coordinator appends); the epoch still counts."""
    log = open_log(tmp_path / "p-0")
    for round_ in range(3):
        txn_batch = batch(producer_id=5, producer_epoch=1, is_transactional=True, tag=round_)
        appended = log.append(txn_batch)
        assert (appended.duplicate, appended.base_offset) == (False, 2 * round_)
        assert log.has_ongoing_transaction(5)
        log.append_marker(producer_id=5, producer_epoch=1, commit=round_ % 2 == 0)
    assert log.last_stable_offset == log.log_end_offset == 6
    with pytest.raises(InvalidProducerEpochError):
        log.append(batch(producer_id=5, producer_epoch=0, is_transactional=True))
    log.close()
