"""Hypothesis: transactional producers against a plain-Python model of the LSO, the ongoing
transactions and the aborted list, across rolls and clean or crashed reopens."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.log import AbortedTxn, InvalidProducerEpochError, InvalidTxnStateError, Log
from tests.support.log_files import batch, crash, open_log, overlapping, read_all, txn_state_of

PRODUCERS = (11, 22, 33)

operations = st.lists(
    st.one_of(
        # a batch of n records from producer i, transactional or only idempotent
        st.tuples(st.just("data"), st.integers(0, 2), st.booleans(), st.integers(1, 4)),
        # a marker: commit, abort, abort with the next epoch (fencing), or a stale epoch
        st.tuples(
            st.just("marker"),
            st.integers(0, 2),
            st.sampled_from(["commit", "abort", "fence", "stale"]),
        ),
        st.tuples(st.just("plain"), st.integers(1, 3)),  # no producer id
        st.tuples(st.just("roll")),
        st.tuples(st.just("reopen"), st.sampled_from(["clean", "crash", "crash_flushed"])),
    ),
    min_size=1,
    max_size=50,
)


@dataclass
class Model:
    log_end_offset: int = 0
    ongoing: dict[int, int] = field(default_factory=dict)
    aborted: list[AbortedTxn] = field(default_factory=list)
    epochs: dict[int, int] = field(default_factory=dict)
    sequences: dict[int, int] = field(default_factory=dict)

    @property
    def last_stable_offset(self) -> int:
        return min(self.ongoing.values(), default=self.log_end_offset)

    def marker(self, producer_id: int, *, abort: bool) -> None:
        offset = self.log_end_offset
        self.log_end_offset += 1
        first = self.ongoing.pop(producer_id, None)
        if first is not None and abort:
            self.aborted.append(
                AbortedTxn(
                    producer_id=producer_id,
                    first_offset=first,
                    last_offset=offset,
                    last_stable_offset=self.last_stable_offset,
                )
            )


def _apply(log: Log, model: Model, operation: tuple[Any, ...]) -> None:
    kind = operation[0]
    if kind == "plain":
        n = operation[1]
        log.append(batch(n))
        model.log_end_offset += n
        return
    if kind == "roll":
        log.roll()
        return
    pid = PRODUCERS[operation[1]]
    epoch = model.epochs.get(pid, 0)
    if kind == "data":
        transactional, n = operation[2], operation[3]
        seq = model.sequences.get(pid, 0)
        sent = batch(
            n,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=transactional,
        )
        if pid in model.ongoing and not transactional:
            with pytest.raises(InvalidTxnStateError):
                log.append(sent)
            return
        assert log.append(sent).base_offset == model.log_end_offset
        if transactional:
            model.ongoing.setdefault(pid, model.log_end_offset)
        model.log_end_offset += n
        model.sequences[pid] = seq + n
        return
    action = operation[2]
    if action == "stale":
        if pid in model.epochs and epoch > 0:
            with pytest.raises(InvalidProducerEpochError):
                log.append_marker(producer_id=pid, producer_epoch=epoch - 1, commit=False)
        return
    if action == "fence":
        epoch += 1
        model.epochs[pid] = epoch
        model.sequences[pid] = 0
    else:
        model.epochs.setdefault(pid, epoch)
    result = log.append_marker(producer_id=pid, producer_epoch=epoch, commit=action == "commit")
    assert result.base_offset == model.log_end_offset
    model.marker(pid, abort=action != "commit")


def _check(log: Log, model: Model, *, thoroughly: bool) -> None:
    assert log.log_end_offset == model.log_end_offset
    assert log.last_stable_offset == model.last_stable_offset
    assert log.ongoing_transactions() == model.ongoing
    if not thoroughly:
        return
    end = model.log_end_offset
    for start in range(0, end + 1):
        for upper in (start + 1, start + 5, end, end + 1):
            if upper >= start:
                assert log.aborted_transactions(start, upper) == overlapping(
                    model.aborted, start, upper
                ), (start, upper)
    assert txn_state_of(read_all(log)) == (model.ongoing, model.aborted)


@settings(max_examples=80, deadline=None)
@given(operations=operations, segment_bytes=st.integers(200, 1500))
def test_transactions_match_a_model(operations: list[tuple[Any, ...]], segment_bytes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "t-0"
        log = open_log(directory, segment_bytes=segment_bytes)
        model = Model()
        try:
            for operation in operations:
                if operation[0] == "reopen":
                    if operation[1] == "clean":
                        log.close()
                    else:
                        if operation[1] == "crash_flushed":
                            log.flush()
                        crash(log)
                    log = open_log(directory, segment_bytes=segment_bytes)
                    _check(log, model, thoroughly=True)
                    continue
                _apply(log, model, operation)
                _check(log, model, thoroughly=False)
            _check(log, model, thoroughly=True)
        finally:
            log.close()
