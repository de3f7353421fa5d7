"""The transaction coordinator: transactional ids, their epochs, and their requests.

One broker is the coordinator of every transactional id; its state is the last record per
id in ``__transaction_state`` (:mod:`riverbed.broker.txn.state_log`), cached in memory and
replayed at start-up. Every request of an id runs under that id's lock, so a transaction's
steps never interleave. Ending a transaction is Kafka's two-phase commit, in
:mod:`riverbed.broker.txn.engine`.

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

import logging
from collections import defaultdict
from collections.abc import Iterable

from riverbed.broker.internal_topics import OFFSETS_TOPIC
from riverbed.broker.txn.engine import TransactionEngine, TxnSettings
from riverbed.broker.txn.transaction_metadata import TopicPartition, TxnMetadata, TxnState
from riverbed.log import Log, LogError
from riverbed.protocol import ErrorCode

__all__ = ["TransactionCoordinator", "TxnSettings"]

log = logging.getLogger(__name__)

E = ErrorCode
NO_PRODUCER_ID = -1


class TransactionCoordinator(TransactionEngine):
    """Transactional ids and their transactions (see the module docstring).

    Construct, :meth:`load` (in a thread if you like), ``await`` :meth:`recover`, then use
    from the event loop. Methods answer with an ``ErrorCode``; a failed write of the state
    log answers COORDINATOR_NOT_AVAILABLE and leaves the cached state as it was.
    """

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

    # --- checks ------------------------------------------------------------------------------

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

    # --- expiry -----------------------------------------------------------------------------

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


def _is_open(meta: TxnMetadata) -> bool:
    """Has a transaction begun that is not complete yet?"""
    return meta.state is TxnState.ONGOING or meta.state.is_prepare
