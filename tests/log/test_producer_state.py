"""Idempotent producer rules, and that the state survives restarts."""

from __future__ import annotations

from pathlib import Path

import pytest
from log_helpers import batch, open_log, read_all

from riverbed.log.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from riverbed.log.log import Log

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
