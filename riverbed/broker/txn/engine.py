"""The transaction engine: the cached state of every transactional id, the two-phase
commit that ends a transaction, and its timeout (the request side is
:mod:`riverbed.broker.txn.coordinator`).

Ending a transaction (EndTxn, a timeout, or a fence by a new producer instance) is Kafka's
two-phase commit, with the markers written by the coordinator itself (one broker: no
WriteTxnMarkers round trip):

1. For a commit, every partition of the transaction is fsynced first: the broker answers
   a transactional produce and TxnOffsetCommit without waiting for an fsync (what they
   wrote counts only if this commit happens), so it is done once here, before the decision
   can reach the disk. Then PrepareCommit/PrepareAbort is appended and fsynced: from here
   the outcome is decided. The record keeps each partition's log end offset (its *bound*:
   the transaction's data lies below it).
2. A commit or abort control batch is appended to every partition of the transaction
   (``Log.append_marker``); read_committed readers see the outcome at once.
3. The id is CompleteCommit/CompleteAbort, and the client answered. The markers are
   fsynced in the background: if the machine loses them, the Prepare* record is on disk
   and recovery writes them again. The Complete* state is kept in memory only (a record
   per transaction less): the id's next record supersedes it, and recovery writes it for
   a Prepare* record it finds complete.

An Ongoing transaction ``transaction.timeout.ms`` after it began is aborted with the next
epoch (its producer fenced), as Kafka does, so its data never becomes visible.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from riverbed.broker.groups.timers import Timers
from riverbed.broker.internal_topics import Flush
from riverbed.broker.txn.state_log import TxnStateLog
from riverbed.broker.txn.transaction_metadata import TopicPartition, TxnMetadata, TxnState
from riverbed.log import Log, LogError, LogManager
from riverbed.protocol import ErrorCode

__all__ = ["MAX_EPOCH", "OnMarker", "TransactionEngine", "TxnSettings"]

log = logging.getLogger(__name__)

E = ErrorCode
MAX_EPOCH = 2**15 - 1
"""producer_epoch is an int16; at the last usable epoch an id gets a new producer id."""

OnMarker = Callable[[str, int, int, bool], None]
"""Called with (topic, partition, producer_id, commit) after each marker is appended."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnSettings:
    """The coordinator's settings; defaults are Kafka's (broker names in brackets)."""

    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms (15 minutes)
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms (7 days)


class TransactionEngine:
    """The state of every transactional id and the steps that change it (module doc)."""

    def __init__(
        self,
        *,
        logs: LogManager,
        flush: Flush,
        timers: Timers,
        settings: TxnSettings,
        on_marker: OnMarker,
        state_log: TxnStateLog,
    ) -> None:
        self._logs = logs
        self._flush = flush
        self._timers = timers
        self._settings = settings
        self._on_marker = on_marker
        self._state_log = state_log
        self._txns: dict[str, TxnMetadata] = {}
        self._by_producer: dict[int, TxnMetadata] = {}
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._tasks: set[asyncio.Task[None]] = set()
        self.loaded = False

    async def close(self) -> None:
        self._timers.cancel_all()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # --- the steps --------------------------------------------------------------------------

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
        if commit:
            error = await self._flush_data(meta)
            if error is not E.none:
                return error
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

    async def _flush_data(self, meta: TxnMetadata) -> ErrorCode:
        """fsync the transaction's partitions (its data and offsets), before a commit is
        decided: the Prepare record must not reach the disk ahead of what it commits."""
        logs: list[Log] = []
        for topic, partition in meta.partitions:
            with contextlib.suppress(LogError):  # a deleted topic: nothing left to commit
                logs.append(self._logs.log(topic, partition))
        try:
            await self._flush(logs)
        except OSError as e:
            log.error("transaction %s: fsync failed: %s", meta.transactional_id, e)
            return E.coordinator_not_available  # still Ongoing: the client may retry
        return E.none

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

    # --- timeouts ----------------------------------------------------------------------------

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
