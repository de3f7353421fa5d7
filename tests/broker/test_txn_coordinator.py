"""The transaction coordinator as a state machine: a fake clock, no sockets.

The logs are real (a LogManager in a temporary directory): state records really go through
``__transaction_state`` and markers into the partitions, and a fresh coordinator replays them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from riverbed.broker.groups import ManualTimers
from riverbed.broker.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, InternalTopic
from riverbed.broker.txn import TransactionCoordinator, TxnSettings, TxnState, TxnStateLog
from riverbed.broker.txn.engine import MAX_EPOCH
from riverbed.log import Log, LogManager, SimpleRecord, TopicConfig, build_batch
from riverbed.protocol import ErrorCode as E

T = TypeVar("T")
TP = ("t", 0)
START_MS = 1_767_225_600_000


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


class Fixture:
    def __init__(self, directory: Path, *, start_ms: int = START_MS, **settings: int) -> None:
        self.timers = ManualTimers(start_ms=start_ms)
        self.logs = LogManager.open(directory, defaults=TopicConfig(), clock=self.timers.now_ms)
        if "t" not in self.logs.topics():
            self.logs.create_topic("t", partitions=2)
        self.markers: list[tuple[str, int, int, bool]] = []
        self.flushes: list[tuple[list[Log], int]] = []
        """Each fsync the coordinator asked for: the logs, and the state records by then."""
        state = InternalTopic(
            self.logs,
            TRANSACTION_STATE_TOPIC,
            flush=self._flush,
            clock=self.timers.now_ms,
            partitions=3,
        )
        self.txns = TransactionCoordinator(
            logs=self.logs,
            flush=self._flush,
            timers=self.timers,
            settings=TxnSettings(**settings),
            on_marker=lambda *marker: self.markers.append(marker),
            state_log=TxnStateLog(state),
        )
        self.txns.load()

    async def _flush(self, logs: Iterable[Log]) -> None:
        flushed = list(logs)
        self.flushes.append((flushed, self.state_records()))
        for log in flushed:
            log.flush()

    def state_records(self) -> int:
        """How many records ``__transaction_state`` holds."""
        topic = self.logs.topics().get(TRANSACTION_STATE_TOPIC)
        if topic is None:
            return 0
        return sum(
            self.logs.log(TRANSACTION_STATE_TOPIC, p).log_end_offset
            for p in range(topic.partitions)
        )

    async def start(self) -> None:
        await self.txns.recover()

    def produce(self, pid: int, epoch: int, seq: int, partition: int = 0) -> None:
        batch = build_batch(
            [SimpleRecord(value=b"v")],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=True,
        )
        self.logs.log("t", partition).append(batch)

    def close(self) -> None:
        self.logs.close()


def test_a_new_instance_aborts_the_open_transaction_and_fences_the_old_epoch(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        f = Fixture(tmp_path)
        await f.start()
        code, pid, epoch = await f.txns.init_producer_id("a", timeout_ms=60_000)
        assert (code, epoch) == (E.none, 0)
        assert await f.txns.add_partitions("a", producer_id=pid, producer_epoch=0, partitions=[TP])
        f.produce(pid, 0, 0)
        assert f.logs.log("t", 0).last_stable_offset == 0

        code, pid2, epoch2 = await f.txns.init_producer_id("a", timeout_ms=60_000)
        assert (code, pid2, epoch2) == (E.none, pid, 1)
        assert f.markers == [("t", 0, pid, False)]
        assert f.logs.log("t", 0).last_stable_offset == 2
        assert f.txns.describe("a").state is TxnState.EMPTY  # type: ignore[union-attr]
        for call in (
            f.txns.add_partitions("a", producer_id=pid, producer_epoch=0, partitions=[TP]),
            f.txns.end_txn("a", producer_id=pid, producer_epoch=0, commit=True),
        ):
            result = await call
            codes = set(result.values()) if isinstance(result, dict) else {result}
            assert codes == {E.producer_fenced}
        assert f.txns.verify("a", producer_id=pid, producer_epoch=0, tp=TP) == (
            E.invalid_producer_epoch
        )
        f.close()

    run(scenario())


def test_kip_360_a_retried_bump_gets_the_current_epoch_and_a_stale_one_is_fenced(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        f = Fixture(tmp_path)
        await f.start()
        _, pid, _ = await f.txns.init_producer_id("k", timeout_ms=60_000)
        # The producer names its epoch 0 to get a bump (after an abortable error) ...
        assert await f.txns.init_producer_id(
            "k", timeout_ms=60_000, producer_id=pid, producer_epoch=0
        ) == (E.none, pid, 1)
        # ... the answer was lost and it asks again with epoch 0: it gets 1 again.
        assert await f.txns.init_producer_id(
            "k", timeout_ms=60_000, producer_id=pid, producer_epoch=0
        ) == (E.none, pid, 1)
        assert (
            await f.txns.init_producer_id(
                "k", timeout_ms=60_000, producer_id=pid + 1, producer_epoch=1
            )
        )[0] == E.producer_fenced
        assert (
            await f.txns.init_producer_id("k", timeout_ms=60_000, producer_id=pid, producer_epoch=7)
        )[0] == E.producer_fenced
        f.close()

    run(scenario())


def test_the_last_epoch_moves_to_a_new_producer_id(tmp_path: Path) -> None:
    async def scenario() -> None:
        f = Fixture(tmp_path)
        await f.start()
        _, pid, _ = await f.txns.init_producer_id("x", timeout_ms=60_000)
        meta = f.txns.describe("x")
        assert meta is not None
        meta.producer_epoch = MAX_EPOCH - 1
        await f.txns._persist(meta, flush=True)  # as if it had been bumped 32,766 times
        code, new_pid, epoch = await f.txns.init_producer_id("x", timeout_ms=60_000)
        assert (code, epoch) == (E.none, 0)
        assert new_pid != pid
        f.close()

    run(scenario())


def test_timeouts_abort_fence_and_survive_a_restart(tmp_path: Path) -> None:
    async def first() -> int:
        f = Fixture(tmp_path)
        await f.start()
        _, pid, _ = await f.txns.init_producer_id("slow", timeout_ms=5_000)
        await f.txns.add_partitions("slow", producer_id=pid, producer_epoch=0, partitions=[TP])
        f.produce(pid, 0, 0)
        f.timers.advance(4_000)
        await asyncio.sleep(0)
        assert f.txns.describe("slow").state is TxnState.ONGOING  # type: ignore[union-attr]
        f.close()  # the broker stops with the transaction open
        return pid

    pid = run(first())

    async def second() -> None:
        f = Fixture(tmp_path, start_ms=START_MS + 4_000)  # the clock went on
        await f.start()
        assert f.txns.describe("slow").state is TxnState.ONGOING  # type: ignore[union-attr]
        f.timers.advance(500)
        for _ in range(5):
            await asyncio.sleep(0)
        assert f.txns.describe("slow").state is TxnState.ONGOING  # type: ignore[union-attr]
        f.timers.advance(1_000)  # past 5 s after it began
        for _ in range(20):
            await asyncio.sleep(0)
        meta = f.txns.describe("slow")
        assert meta is not None
        assert (meta.state, meta.producer_epoch) == (TxnState.COMPLETE_ABORT, 1)
        assert f.markers == [("t", 0, pid, False)]
        assert f.logs.log("t", 0).last_stable_offset == f.logs.log("t", 0).high_watermark
        assert await f.txns.end_txn("slow", producer_id=pid, producer_epoch=0, commit=True) == (
            E.producer_fenced
        )
        f.close()

    run(second())


def test_idle_ids_expire_and_open_ones_do_not(tmp_path: Path) -> None:
    async def scenario() -> None:
        f = Fixture(tmp_path, id_expiration_ms=10_000)
        await f.start()
        await f.txns.init_producer_id("idle", timeout_ms=60_000)
        _, busy_pid, _ = await f.txns.init_producer_id("busy", timeout_ms=60_000)
        await f.txns.add_partitions("busy", producer_id=busy_pid, producer_epoch=0, partitions=[TP])
        f.timers.advance(11_000)
        for _ in range(20):
            await asyncio.sleep(0)
        assert f.txns.describe("idle") is None
        assert f.txns.describe("busy") is not None
        f.close()
        g = Fixture(tmp_path, id_expiration_ms=10_000)  # the tombstone is in the state log
        assert g.txns.describe("idle") is None
        assert g.txns.describe("busy") is not None
        g.close()

    run(scenario())


@pytest.mark.parametrize("commit", [True, False])
def test_a_decided_transaction_is_completed_by_the_next_start(tmp_path: Path, commit: bool) -> None:
    async def first() -> int:
        f = Fixture(tmp_path)
        await f.start()
        _, pid, _ = await f.txns.init_producer_id("d", timeout_ms=60_000)
        partitions = [TP, ("t", 1)]
        await f.txns.add_partitions("d", producer_id=pid, producer_epoch=0, partitions=partitions)
        f.produce(pid, 0, 0, partition=0)
        f.produce(pid, 0, 0, partition=1)
        meta = f.txns.describe("d")
        assert meta is not None
        # Crash between the decision and the markers: only the Prepare* record is written.
        meta.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        meta.bounds = {tp: f.logs.log(*tp).log_end_offset for tp in partitions}
        await f.txns._persist(meta, flush=True)
        f.close()
        return pid

    pid = run(first())

    async def second() -> None:
        f = Fixture(tmp_path)
        await f.start()
        assert sorted(f.markers) == [("t", 0, pid, commit), ("t", 1, pid, commit)]
        for partition in (0, 1):
            partition_log = f.logs.log("t", partition)
            assert partition_log.last_stable_offset == partition_log.high_watermark == 2
            assert bool(partition_log.aborted_transactions(0, 2)) is not commit
        expected = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        assert f.txns.describe("d").state is expected  # type: ignore[union-attr]
        f.close()
        g = Fixture(tmp_path)  # and a third start writes nothing more
        await g.start()
        assert g.markers == []
        g.close()

    run(second())


def test_a_commit_fsyncs_its_data_and_offsets_before_its_decision_is_written(
    tmp_path: Path,
) -> None:
    """The broker answers a transactional produce and TxnOffsetCommit before any fsync, so
    EndTxn must fsync the transaction's partitions itself, and before the PrepareCommit
    record exists: otherwise the page cache could write the decision to disk ahead of what
    it commits, and a machine crash would leave a committed transaction missing its data."""

    async def scenario() -> None:
        f = Fixture(tmp_path)
        await f.start()
        f.logs.create_topic(OFFSETS_TOPIC, partitions=1)  # as AddOffsetsToTxn's handler does
        _, pid, _ = await f.txns.init_producer_id("d", timeout_ms=60_000)
        await f.txns.add_partitions("d", producer_id=pid, producer_epoch=0, partitions=[TP])
        assert await f.txns.add_offsets("d", producer_id=pid, producer_epoch=0, partition=0) == (
            E.none
        )
        f.produce(pid, 0, 0)
        data, offsets = f.logs.log(*TP), f.logs.log(OFFSETS_TOPIC, 0)
        offsets.append(  # what TxnOffsetCommit writes (riverbed.broker.groups.offset_store)
            build_batch(
                [SimpleRecord(key=b"k", value=b"v")],
                producer_id=pid,
                producer_epoch=0,
                is_transactional=True,
            )
        )
        assert data.flushed_offset < data.log_end_offset
        records_before = f.state_records()
        f.flushes.clear()
        assert await f.txns.end_txn("d", producer_id=pid, producer_epoch=0, commit=True) == E.none

        first_logs, records_then = f.flushes[0]
        assert {id(log) for log in first_logs} == {id(data), id(offsets)}
        assert records_then == records_before, "the decision was written before the data's fsync"
        assert f.state_records() == records_before + 1  # PrepareCommit
        assert len(f.flushes) == 2 and f.flushes[1][1] == records_before + 1  # then its fsync
        assert sorted(f.markers) == [(OFFSETS_TOPIC, 0, pid, True), ("t", 0, pid, True)]
        f.close()

    run(scenario())


def test_an_abort_fsyncs_no_data(tmp_path: Path) -> None:
    """Aborted data counts for nothing, so an abort fsyncs only its decision."""

    async def scenario() -> None:
        f = Fixture(tmp_path)
        await f.start()
        _, pid, _ = await f.txns.init_producer_id("d", timeout_ms=60_000)
        await f.txns.add_partitions("d", producer_id=pid, producer_epoch=0, partitions=[TP])
        f.produce(pid, 0, 0)
        f.flushes.clear()
        assert await f.txns.end_txn("d", producer_id=pid, producer_epoch=0, commit=False) == (
            E.none
        )
        assert len(f.flushes) == 1
        assert all(log is not f.logs.log(*TP) for log in f.flushes[0][0])
        f.close()

    run(scenario())
