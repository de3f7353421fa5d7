"""``__transaction_state``: where the transaction coordinator keeps its ids.

One record per change of an id (format in
:mod:`riverbed.broker.txn.transaction_metadata`), appended to the partition of the id
(``abs(java_hash(id)) % partitions``, as Kafka places both groups and transactional ids),
read back whole at start-up; the last record per id wins, a tombstone forgets it. The
topic is created on first write, compacted, with ``transaction.state.log.num.partitions``
partitions (an existing topic keeps its count).
"""

from __future__ import annotations

import logging

from riverbed.broker.internal_topics import TRANSACTION_STATE_TOPIC, InternalTopic
from riverbed.broker.txn.transaction_metadata import (
    TxnMetadata,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from riverbed.log import decode_records

__all__ = ["TxnStateLog"]

log = logging.getLogger(__name__)


class TxnStateLog:
    """Reads and appends the records of ``__transaction_state``."""

    def __init__(self, topic: InternalTopic) -> None:
        """``topic`` is ``__transaction_state``, created on the first write."""
        self._topic = topic

    def load(self) -> dict[str, TxnMetadata]:
        """The last state of every id that has one (a record that does not decode is
        logged and skipped; it never stops the broker)."""
        states: dict[str, TxnMetadata] = {}
        for partition, header, batch in self._topic.replay():
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
        key = meta.transactional_id
        await self._topic.append(key, [(encode_key(key), encode_value(meta))], flush=flush)

    async def forget(self, transactional_id: str) -> None:
        """Append the id's tombstone (not fsynced: losing it only delays the forgetting)."""
        await self._topic.append(
            transactional_id, [(encode_key(transactional_id), None)], flush=False
        )
