"""The transaction coordinator: transactional ids, their epochs, and two-phase commit.

One broker is the coordinator of every transactional id; its state is the last record per
id in ``__transaction_state`` (:mod:`riverbed.broker.txn.metadata`), cached in memory and
replayed at start-up. Every request of an id runs under that id's lock, so a transaction's
steps never interleave.

Ending a transaction (EndTxn, a timeout, or a fence by a new producer instance) is Kafka's
two-phase commit, with the markers written by the coordinator itself (one broker: no
WriteTxnMarkers round trip):

1. PrepareCommit/PrepareAbort is appended and fsynced: from here the outcome is decided.
   The record keeps each partition's log end offset (its *bound*: the transaction's data
   lies below it).
2. A commit or abort control batch is appended to every partition of the transaction
   (``Log.append_marker``); read_committed readers see the outcome at once.
3. The id is CompleteCommit/CompleteAbort, and the client answered. The markers are
   fsynced in the background: if the machine loses them, the Prepare* record is on disk
   and recovery writes them again. The Complete* state is kept in memory only (a record
   per transaction less): the id's next record supersedes it, and recovery writes it for
   a Prepare* record it finds complete.

After a crash (:meth:`TransactionCoordinator.recover`), an id found in a Prepare* state
gets steps 2 and 3 again, and an id in a Complete* state has its partitions checked: a
marker is written only where the producer still has an open transaction that began below
the partition's bound, so nothing is written twice and a later transaction's data is never
taken for this one's. An Ongoing transaction keeps its timeout: ``transaction.timeout.ms``
after it began, the coordinator fences the producer (epoch + 1) and aborts it, as Kafka
does, so its data never becomes visible.

AddPartitionsToTxn/AddOffsetsToTxn are answered before their record is fsynced (the
commit's fsync of the Prepare* record covers it). If the machine loses such a record, the
data written into that partition belongs to no known transaction: recovery aborts every
such *hanging* transaction and fences its producer, so it can never commit it.

Fencing: InitProducerId for an id with an open transaction aborts it with the next epoch
(every partition then refuses the old epoch) and gives the new instance that epoch; requests
from the old instance get PRODUCER_FENCED. Produce checks every transactional batch against
the coordinator (:meth:`verify`): the partition must have been added to the producer's
open transaction, so a zombie cannot start a hanging transaction on a new partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

from riverbed.broker.groups.timers import Timers
from riverbed.broker.internal_topics import OFFSETS_TOPIC, Flush
from riverbed.broker.txn.metadata import TopicPartition, TxnMetadata, TxnState
from riverbed.broker.txn.state_log import TxnStateLog
from riverbed.log.errors import LogError
from riverbed.log.log import Log
from riverbed.log.manager import LogManager
from riverbed.protocol import ErrorCode

__all__ = ["TransactionCoordinator", "TxnSettings"]

log = logging.getLogger(__name__)

E = ErrorCode
NO_PRODUCER_ID = -1
MAX_EPOCH = 2**15 - 1
"""producer_epoch is an int16; at the last usable epoch an id gets a new producer id."""

OnMarker = Callable[[str, int, int, bool], None]
"""Called with (topic, partition, producer_id, commit) after each marker is appended."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnSettings:
    max_timeout_ms: int = 900_000
    partitions: int = 50
    segment_bytes: int = 104_857_600
    id_expiration_ms: int = 604_800_000


class TransactionCoordinator:
    """Transactional ids and their transactions (see the module docstring).

    Construct, :meth:`load` (in a thread if you like), ``await`` :meth:`recover`, then use
    from the event loop. Methods answer with an ``ErrorCode``; a failed write of the state
    log answers COORDINATOR_NOT_AVAILABLE and leaves the cached state as it was.
    """

    def __init__(
        self,
        *,
        logs: LogManager,
        flush: Flush,
        timers: Timers,
        settings: TxnSettings,
        on_marker: OnMarker,
    ) -> None:
        self._logs = logs
        self._flush = flush
        self._timers = timers
        self._settings = settings
        self._on_marker = on_marker
        self._state_log = TxnStateLog(
            logs,
            flush=flush,
            clock=timers.now_ms,
            partitions=settings.partitions,
            segment_bytes=settings.segment_bytes,
        )
        self._txns: dict[str, TxnMetadata] = {}
        self._by_producer: dict[int, TxnMetadata] = {}
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._tasks: set[asyncio.Task[None]] = set()
        self.loaded = False

    # --- start-up ---------------------------------------------------------------------------

    def load(self) -> None:
        """Replay ``__transaction_state`` (the last record per id wins)."""
        for meta in self._state_log.load().values():
            self._set(meta)

    async def recover(self) -> None:
        """Finish what a crash interrupted (module docstring), arm the timeouts, then
        start answering requests."""
        marked: list[Log] = []
        for meta in list(self._txns.values()):
            if meta.state.is_prepare:
                await self._complete(meta, recovering=True)
            elif meta.state.is_complete:
                marked += self._write_markers(meta, commit=meta.state.commits, recovering=True)
            elif meta.state is TxnState.ONGOING:
                self._arm_timeout(meta)
        marked += await self._abort_hanging()
        if marked:
            await self._flush(marked)
        self._arm_expiry()
        self.loaded = True

    def _all_logs(self) -> dict[TopicPartition, Log]:
        return {
            (name, partition): self._logs.log(name, partition)
            for name, topic in self._logs.topics().items()
            for partition in range(topic.partitions)
        }

    async def _abort_hanging(self) -> list[Log]:
        """Abort transactional data no open transaction accounts for (Kafka's "hanging
        transactions"), and fence its producer.

        It can only come from state-log records lost with the machine (AddPartitionsToTxn
        is acknowledged before its record is fsynced; a commit fsyncs it, so such a
        transaction never committed). Its producer may still be alive and believe the data
        is in its transaction: fencing it (the next epoch) makes its commit fail instead.
        Returns the logs it wrote markers to.
        """
        marked: list[Log] = []
        hanging: dict[int, list[tuple[TopicPartition, Log]]] = defaultdict(list)
        for tp, partition_log in self._all_logs().items():
            for producer_id in partition_log.ongoing_transactions():
                meta = self._by_producer.get(producer_id)
                if meta is None or meta.state is not TxnState.ONGOING or tp not in meta.partitions:
                    hanging[producer_id].append((tp, partition_log))
        for producer_id, places in hanging.items():
            meta = self._by_producer.get(producer_id)
            log.warning(
                "aborting hanging transactional data of producer %d (transactional id %s) in %s",
                producer_id,
                None if meta is None else meta.transactional_id,
                ", ".join(f"{t}-{p}" for (t, p), _ in places),
            )
            epoch = max(
                partition_log.producer_epoch(producer_id) or 0 for _, partition_log in places
            )
            if meta is not None:
                if meta.state is TxnState.ONGOING:
                    await self._fence_and_abort(meta)
                else:
                    fenced = self._bump(meta)
                    fenced.state, fenced.partitions, fenced.bounds = TxnState.EMPTY, set(), {}
                    fenced.start_ms, fenced.update_ms = -1, self._timers.now_ms()
                    await self._persist(fenced, flush=True)
                current = self._txns[meta.transactional_id]
                if current.producer_id == producer_id:
                    epoch = max(epoch, current.producer_epoch)
            for (topic, partition), partition_log in places:
                if partition_log.has_ongoing_transaction(producer_id):
                    partition_log.append_marker(
                        producer_id=producer_id, producer_epoch=epoch, commit=False
                    )
                    self._on_marker(topic, partition, producer_id, False)
                    marked.append(partition_log)
        return marked

    async def close(self) -> None:
        self._timers.cancel_all()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # --- requests ---------------------------------------------------------------------------

    async def init_producer_id(
        self,
        transactional_id: str,
        *,
        timeout_ms: int,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = -1,
    ) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch) for a new instance of ``transactional_id``; an open
        transaction of the previous instance is aborted with the new epoch first."""
        if not self.loaded:
            return E.coordinator_load_in_progress, NO_PRODUCER_ID, -1
        if not transactional_id:
            return E.invalid_request, NO_PRODUCER_ID, -1
        if not 0 < timeout_ms <= self._settings.max_timeout_ms:
            return E.invalid_transaction_timeout, NO_PRODUCER_ID, -1
        async with self._locks[transactional_id]:
            meta = self._txns.get(transactional_id)
            now = self._timers.now_ms()
            if meta is None:
                new = TxnMetadata(
                    transactional_id=transactional_id,
                    producer_id=self._logs.allocate_producer_id(),
                    producer_epoch=0,
                    timeout_ms=timeout_ms,
                    update_ms=now,
                )
                return await self._init_result(new)
            if producer_id != NO_PRODUCER_ID:  # KIP-360: the client names its current epoch
                if producer_id != meta.producer_id:
                    return E.producer_fenced, NO_PRODUCER_ID, -1
                if producer_epoch != meta.producer_epoch:
                    if producer_epoch != meta.last_producer_epoch or _is_open(meta):
                        return E.producer_fenced, NO_PRODUCER_ID, -1
                    # Its epoch was bumped already (a lost answer, or the coordinator aborted
                    # its timed-out transaction): it goes on with the current epoch.
                    same = meta.copy()
                    same.state, same.partitions, same.start_ms = TxnState.EMPTY, set(), -1
                    same.timeout_ms, same.update_ms = timeout_ms, now
                    return await self._init_result(same)
            if meta.state is TxnState.ONGOING:
                # Fence the previous instance: abort its transaction with the next epoch,
                # which the new instance then gets (a new producer id if none was left).
                error = await self._fence_and_abort(meta)
                if error is not E.none:
                    return error, NO_PRODUCER_ID, -1
                aborted = self._txns[transactional_id]
                fenced = aborted.producer_epoch > meta.producer_epoch
                bumped = aborted.copy() if fenced else self._bump(aborted)
            elif meta.state.is_prepare:
                error = await self._complete(meta)  # a crash left it half done
                if error is not E.none:
                    return error, NO_PRODUCER_ID, -1
                bumped = self._bump(self._txns[transactional_id])
            else:
                bumped = self._bump(meta)
            bumped.state = TxnState.EMPTY
            bumped.partitions = set()
            bumped.start_ms = -1
            bumped.timeout_ms = timeout_ms
            bumped.update_ms = now
            return await self._init_result(bumped)

    async def _init_result(self, meta: TxnMetadata) -> tuple[ErrorCode, int, int]:
        error = await self._persist(meta, flush=True)
        if error is not E.none:
            return error, NO_PRODUCER_ID, -1
        return E.none, meta.producer_id, meta.producer_epoch

    async def add_partitions(
        self,
        transactional_id: str,
        *,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """Add ``partitions`` to the open transaction (opening it); an error per partition."""
        wanted = set(partitions)
        async with self._locks[transactional_id]:
            error = self._check(transactional_id, producer_id, producer_epoch)
            if error is not E.none:
                return dict.fromkeys(wanted, error)
            unknown = {tp for tp in wanted if not self._partition_exists(tp)}
            if unknown:
                return {
                    tp: E.unknown_topic_or_partition if tp in unknown else E.operation_not_attempted
                    for tp in wanted
                }
            error = await self._add(self._txns[transactional_id], wanted)
            return dict.fromkeys(wanted, error)

    async def add_offsets(
        self, transactional_id: str, *, producer_id: int, producer_epoch: int, partition: int
    ) -> ErrorCode:
        """Add the ``__consumer_offsets`` partition of a group to the open transaction."""
        async with self._locks[transactional_id]:
            error = self._check(transactional_id, producer_id, producer_epoch)
            if error is not E.none:
                return error
            return await self._add(self._txns[transactional_id], {(OFFSETS_TOPIC, partition)})

    async def end_txn(
        self, transactional_id: str, *, producer_id: int, producer_epoch: int, commit: bool
    ) -> ErrorCode:
        """Commit or abort the open transaction; a retry of a finished one succeeds again."""
        async with self._locks[transactional_id]:
            meta = self._txns.get(transactional_id)
            if (
                meta is not None
                and meta.state.is_complete
                and meta.producer_id == producer_id
                and meta.producer_epoch == producer_epoch
            ):
                # A retry whose first answer was lost succeeds again; the other outcome not.
                return E.none if meta.state.commits == commit else E.invalid_txn_state
            error = self._check(transactional_id, producer_id, producer_epoch, prepared_ok=True)
            if error is not E.none:
                return error
            assert meta is not None
            if meta.state.is_prepare:  # decided, but the markers failed: finish it now
                if meta.state.commits != commit:
                    return E.invalid_txn_state
                return await self._complete(meta)
            if meta.state is not TxnState.ONGOING:
                return E.invalid_txn_state
            return await self._end(meta, commit=commit)

    def verify(
        self, transactional_id: str, *, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> ErrorCode:
        """May this producer write transactional data (or offsets) to ``tp`` now? Only into
        an open transaction the partition was added to (KIP-890's verification)."""
        error = self._check(
            transactional_id,
            producer_id,
            producer_epoch,
            prepared_ok=True,
            stale_epoch=E.invalid_producer_epoch,  # what Produce answers a fenced producer
        )
        if error is not E.none:
            return error
        meta = self._txns[transactional_id]
        if meta.state is not TxnState.ONGOING or tp not in meta.partitions:
            return E.invalid_txn_state
        return E.none

    # --- admin ------------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TxnMetadata | None:
        meta = self._txns.get(transactional_id)
        return None if meta is None else meta.copy()

    def list_transactions(
        self,
        *,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        min_duration_ms: int = -1,
    ) -> list[TxnMetadata]:
        """ListTransactions: every id, filtered by state name, producer id and how long its
        open transaction has run (KIP-994: only open ones match a duration; empty filters
        match everything)."""
        state_filter, pid_filter = set(states), set(producer_ids)
        now = self._timers.now_ms()
        return [
            meta.copy()
            for meta in self._txns.values()
            if (not state_filter or meta.state.value in state_filter)
            and (not pid_filter or meta.producer_id in pid_filter)
            and (min_duration_ms < 0 or (_is_open(meta) and now - meta.start_ms >= min_duration_ms))
        ]

    # --- the steps --------------------------------------------------------------------------

    def _check(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        *,
        prepared_ok: bool = False,
        stale_epoch: ErrorCode = E.producer_fenced,
    ) -> ErrorCode:
        """The error for a request of this producer, E.none if it may go on."""
        if not self.loaded:
            return E.coordinator_load_in_progress
        meta = self._txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return E.invalid_producer_id_mapping
        if producer_epoch != meta.producer_epoch:
            return stale_epoch
        if meta.state.is_prepare and not prepared_ok:
            return E.concurrent_transactions  # being completed: the client retries
        return E.none

    def _partition_exists(self, tp: TopicPartition) -> bool:
        topic = self._logs.topics().get(tp[0])
        return topic is not None and 0 <= tp[1] < topic.partitions

    async def _add(self, meta: TxnMetadata, partitions: set[TopicPartition]) -> ErrorCode:
        if meta.state is TxnState.ONGOING and partitions <= meta.partitions:
            return E.none
        new = meta.copy()
        now = self._timers.now_ms()
        if meta.state is not TxnState.ONGOING:
            new.state = TxnState.ONGOING
            new.partitions = set()
            new.start_ms = now
        new.partitions |= partitions
        new.update_ms = now
        # Not fsynced: if the record is lost with the machine, the data written into the
        # partition is aborted at the next start (_abort_hanging); a commit fsyncs it first.
        error = await self._persist(new, flush=False)
        if error is E.none and meta.state is not TxnState.ONGOING:
            self._arm_timeout(new)
        return error

    async def _end(self, meta: TxnMetadata, *, commit: bool) -> ErrorCode:
        prepared = meta.copy()
        prepared.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        prepared.update_ms = self._timers.now_ms()
        prepared.bounds = {}
        for topic, partition in meta.partitions:
            with contextlib.suppress(LogError):  # a deleted topic needs no marker
                prepared.bounds[(topic, partition)] = self._logs.log(
                    topic, partition
                ).log_end_offset
        self._timers.cancel(("txn-timeout", meta.transactional_id))
        error = await self._persist(prepared, flush=True)
        if error is not E.none:
            if meta.state is TxnState.ONGOING:
                self._arm_timeout(meta)
            return error
        return await self._complete(prepared)

    async def _complete(self, prepared: TxnMetadata, *, recovering: bool = False) -> ErrorCode:
        """Steps 2 and 3: the markers, then the Complete* state.

        Nothing waits for an fsync: the Prepare* record is on disk, so a machine crash
        before the markers are ends in recovery writing them. They are fsynced in the
        background."""
        commit = prepared.state.commits
        try:
            written = self._write_markers(prepared, commit=commit, recovering=recovering)
        except (LogError, OSError) as e:
            log.error("transaction %s: writing markers failed: %s", prepared.transactional_id, e)
            return E.coordinator_not_available  # stays Prepare*; a retry or restart finishes it
        if written:
            self._spawn(self._flush_quietly(written))
        done = prepared.copy()
        done.state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        done.update_ms = self._timers.now_ms()
        if recovering:
            return await self._persist(done, flush=False)
        # Not written: the id's next record supersedes it, and a restart that finds the
        # Prepare* record re-checks the markers (all there) and writes it then.
        self._set(done)
        return E.none

    async def _flush_quietly(self, logs: list[Log]) -> None:
        try:
            await self._flush(logs)
        except OSError as e:  # the periodic checkpoint tries again
            log.error("fsync of transaction markers failed: %s", e)

    def _write_markers(self, meta: TxnMetadata, *, commit: bool, recovering: bool) -> list[Log]:
        """Append the outcome's marker to each partition of ``meta`` that needs one.

        Normally that is every partition (a partition without data of this epoch gets one
        too: it fences older epochs there). When ``recovering``, only where the producer
        still has an open transaction that began below the partition's bound (its data is
        this transaction's), or where the producer's epoch there is older."""
        written: list[Log] = []
        pid, epoch = meta.producer_id, meta.producer_epoch
        for topic, partition in sorted(meta.partitions):
            try:
                partition_log = self._logs.log(topic, partition)
            except LogError:
                continue  # the topic was deleted meanwhile: nothing left to mark
            first = partition_log.ongoing_transactions().get(pid)
            known_epoch = partition_log.producer_epoch(pid)
            if recovering:
                bound = meta.bounds.get((topic, partition), -1)
                if first is not None and first >= bound:
                    continue  # a later transaction's data: not ours to decide
                if first is None and known_epoch is not None and known_epoch >= epoch:
                    continue  # marked already
            elif first is None and known_epoch is not None and known_epoch >= epoch:
                continue  # nothing of this epoch to mark, and nothing older to fence
            partition_log.append_marker(producer_id=pid, producer_epoch=epoch, commit=commit)
            written.append(partition_log)
            self._on_marker(topic, partition, pid, commit)
        return written

    async def _fence_and_abort(self, meta: TxnMetadata) -> ErrorCode:
        """Abort ``meta``'s open transaction with the next epoch (fencing its producer). At
        the last epoch the markers keep it: they must carry the transaction's producer id."""
        fenced = meta.copy()
        if meta.producer_epoch < MAX_EPOCH - 1:
            fenced.last_producer_epoch = meta.producer_epoch
            fenced.producer_epoch = meta.producer_epoch + 1
        return await self._end(fenced, commit=False)

    def _bump(self, meta: TxnMetadata) -> TxnMetadata:
        """The next epoch of ``meta``'s producer id, or a new producer id at epoch 0 once
        the epochs are used up (Kafka's rule)."""
        new = meta.copy()
        new.last_producer_epoch = meta.producer_epoch
        if meta.producer_epoch >= MAX_EPOCH - 1:
            new.producer_id = self._logs.allocate_producer_id()
            new.producer_epoch = 0
            new.last_producer_epoch = -1
        else:
            new.producer_epoch = meta.producer_epoch + 1
        return new

    # --- timeouts and expiry ----------------------------------------------------------------

    def _arm_timeout(self, meta: TxnMetadata) -> None:
        transactional_id = meta.transactional_id

        def due() -> None:
            self._spawn(self._abort_timed_out(transactional_id))

        self._timers.set(("txn-timeout", transactional_id), meta.start_ms + meta.timeout_ms, due)

    async def _abort_timed_out(self, transactional_id: str) -> None:
        async with self._locks[transactional_id]:
            meta = self._txns.get(transactional_id)
            if meta is None or meta.state is not TxnState.ONGOING:
                return
            if meta.start_ms + meta.timeout_ms > self._timers.now_ms():
                self._arm_timeout(meta)  # re-armed by a later transaction meanwhile
                return
            log.info(
                "transaction %s (producer %d epoch %d) timed out after %d ms: aborting",
                transactional_id,
                meta.producer_id,
                meta.producer_epoch,
                meta.timeout_ms,
            )
            error = await self._fence_and_abort(meta)
            if error is not E.none:
                log.error("aborting timed-out transaction %s failed: %s", transactional_id, error)

    def _arm_expiry(self) -> None:
        interval = max(1000, min(self._settings.id_expiration_ms // 10, 3_600_000))

        def due() -> None:
            self._spawn(self._expire_ids())
            self._arm_expiry()

        self._timers.set("txn-expiry", self._timers.now_ms() + interval, due)

    async def _expire_ids(self) -> None:
        """Forget ids without an open transaction, unused for transactional.id.expiration.ms
        (a tombstone in the state log), as Kafka does."""
        deadline = self._timers.now_ms() - self._settings.id_expiration_ms
        for transactional_id, meta in list(self._txns.items()):
            if meta.update_ms > deadline or not (
                meta.state is TxnState.EMPTY or meta.state.is_complete
            ):
                continue
            async with self._locks[transactional_id]:
                current = self._txns.get(transactional_id)
                if current is not meta:
                    continue
                try:
                    await self._state_log.forget(transactional_id)
                except (LogError, OSError) as e:
                    log.error("cannot forget transactional id %s: %s", transactional_id, e)
                    continue
                self._forget(transactional_id)
                self._locks.pop(transactional_id, None)

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- the state log ----------------------------------------------------------------------

    async def _persist(self, meta: TxnMetadata, *, flush: bool) -> ErrorCode:
        """Append ``meta`` (fsynced if ``flush``), then make it the cached state."""
        try:
            await self._state_log.write(meta, flush=flush)
        except (LogError, OSError) as e:
            log.error("cannot write the state of transaction %s: %s", meta.transactional_id, e)
            return E.coordinator_not_available
        self._set(meta)
        return E.none

    def _set(self, meta: TxnMetadata) -> None:
        old = self._txns.get(meta.transactional_id)
        if old is not None and self._by_producer.get(old.producer_id) is old:
            del self._by_producer[old.producer_id]
        self._txns[meta.transactional_id] = meta
        self._by_producer[meta.producer_id] = meta

    def _forget(self, transactional_id: str) -> None:
        old = self._txns.pop(transactional_id, None)
        if old is not None and self._by_producer.get(old.producer_id) is old:
            del self._by_producer[old.producer_id]
        self._timers.cancel(("txn-timeout", transactional_id))

    def states(self) -> Mapping[str, TxnMetadata]:
        """The cached state per id (read-only view for tests and tools)."""
        return dict(self._txns)


def _is_open(meta: TxnMetadata) -> bool:
    """Has a transaction begun that is not complete yet?"""
    return meta.state is TxnState.ONGOING or meta.state.is_prepare
