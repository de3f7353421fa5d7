"""``__transaction_state``: where the transaction coordinator keeps its ids.

One record per change of an id (format in :mod:`riverbed.broker.txn.metadata`), appended
to the partition of the id (``abs(java_hash(id)) % partitions``, as Kafka places both
groups and transactional ids), read back whole at start-up; the last record per id wins,
a tombstone forgets it. The topic is created on first write, compacted, with
``transaction.state.log.num.partitions`` partitions (an existing topic keeps its count).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable

from riverbed.broker.groups.records import partition_for
from riverbed.broker.internal_topics import TRANSACTION_STATE_TOPIC, ensure_topic, read_batches
from riverbed.broker.txn.metadata import (
    TxnMetadata,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from riverbed.log.log import Log
from riverbed.log.manager import LogManager
from riverbed.log.records import SimpleRecord, build_batch, decode_records

__all__ = ["TxnStateLog"]

log = logging.getLogger(__name__)

Flush = Callable[[Iterable[Log]], Awaitable[None]]


class TxnStateLog:
    """Reads and appends the records of ``__transaction_state``."""

    def __init__(
        self,
        logs: LogManager,
        *,
        flush: Flush,
        clock: Callable[[], int],
        partitions: int,
        segment_bytes: int,
    ) -> None:
        self._logs = logs
        self._flush = flush
        self._clock = clock
        self._partitions = partitions
        self._segment_bytes = segment_bytes

    def load(self) -> dict[str, TxnMetadata]:
        """The last state of every id that has one (a record that does not decode is
        logged and skipped; it never stops the broker)."""
        states: dict[str, TxnMetadata] = {}
        topic = self._logs.topics().get(TRANSACTION_STATE_TOPIC)
        if topic is None:
            return states
        self._partitions = topic.partitions
        for partition in range(topic.partitions):
            for header, batch in read_batches(self._logs.log(TRANSACTION_STATE_TOPIC, partition)):
                if header.is_control:
                    continue
                for record in decode_records(batch):
                    if record.key is None:
                        continue
                    try:
                        transactional_id = decode_key(record.key)
                        if record.value is None:
                            states.pop(transactional_id, None)
                        else:
                            states[transactional_id] = decode_value(transactional_id, record.value)
                    except (ValueError, KeyError, TypeError) as e:
                        log.warning(
                            "%s-%d offset %d: skipping record: %s",
                            TRANSACTION_STATE_TOPIC,
                            partition,
                            record.offset,
                            e,
                        )
        return states

    async def write(self, meta: TxnMetadata, *, flush: bool) -> None:
        """Append ``meta``'s record (fsynced if ``flush``); LogError/OSError if it failed."""
        await self._append(meta.transactional_id, encode_value(meta), flush=flush)

    async def forget(self, transactional_id: str) -> None:
        """Append the id's tombstone (not fsynced: losing it only delays the forgetting)."""
        await self._append(transactional_id, None, flush=False)

    async def _append(self, transactional_id: str, value: bytes | None, *, flush: bool) -> None:
        self._partitions = ensure_topic(
            self._logs,
            TRANSACTION_STATE_TOPIC,
            partitions=self._partitions,
            segment_bytes=self._segment_bytes,
        )
        partition = partition_for(transactional_id, partitions=self._partitions)
        state_log = self._logs.log(TRANSACTION_STATE_TOPIC, partition)
        now = self._clock()
        record = SimpleRecord(key=encode_key(transactional_id), value=value, timestamp_ms=now)
        state_log.append(build_batch([record], base_timestamp=now))
        if flush:
            await self._flush([state_log])
