"""Committed offsets (and group records), durable in the internal topic ``__consumer_offsets``.

The log is the store: every change is one record appended to the partition of the group
(:func:`~riverbed.broker.internal_topics.partition_for`) and fsynced before the caller is
told it happened — a commit is acknowledged with ``acks=all`` semantics. The in-memory maps
are a cache of the log's last record per key, rebuilt at start-up by :meth:`OffsetStore.load`
(one linear read of every partition). Record format:
:mod:`riverbed.broker.groups.offsets_topic_records`.

The topic is created on first write with ``offsets.topic.num.partitions`` partitions and
``cleanup.policy=compact`` (compaction itself is issue 5). If it already exists, its real
partition count is used, so a changed setting never moves a group's records.

Ordering: two writes of one key may wait for their fsyncs concurrently; each remembers the
log offset of its record and the cache takes a value only if it is newer than the one it
holds, so the cache always equals the log's last record per key.

Transactional offsets (TxnOffsetCommit, a consume-transform-produce producer's
``send_offsets_to_transaction``) are written the same way but in a transactional batch of
the producer; they are *pending* — not returned by :meth:`OffsetStore.fetch` — until the
transaction coordinator writes the producer's commit marker to that partition
(:meth:`OffsetStore.complete_transaction`), and dropped on an abort marker. Replay at
start-up does the same with the batches and markers it reads, as Kafka's group coordinator.

After a crash: what was acknowledged was fsynced, so it is in the log and is loaded; an
unacknowledged tail may or may not survive (the log's recovery decides), as in Kafka.

Threads: :meth:`load` may run in a worker thread before anything else touches the store;
every other method runs on the event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from riverbed.broker.groups.offsets_topic_records import (
    GroupKey,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_value,
    encode_key,
    encode_offset_value,
)
from riverbed.broker.internal_topics import OFFSETS_TOPIC, InternalTopic
from riverbed.log import COMMIT, Log, control_type, decode_records

__all__ = ["OffsetStore", "TopicPartition"]

log = logging.getLogger(__name__)


TopicPartition = tuple[str, int]


@dataclass(slots=True)
class _Entry:
    value: OffsetValue
    log_offset: int


class OffsetStore:
    """Committed offsets per group, and one opaque metadata record per group.

    Construct, call :meth:`load` once (in a thread if you like), then use from the loop.
    Write methods raise ``LogError`` or ``OSError`` if the record could not be appended
    or fsynced (the caller answers with the matching Kafka error); the cache is then
    unchanged.
    """

    def __init__(self, topic: InternalTopic) -> None:
        """``topic`` is ``__consumer_offsets``, created on the first write."""
        self._topic = topic
        self._offsets: dict[str, dict[TopicPartition, _Entry]] = {}
        self._groups: dict[str, tuple[dict[str, Any], int]] = {}
        # (partition, producer id) -> group -> offsets of an open transaction (TxnOffsetCommit)
        self._pending: dict[tuple[int, int], dict[str, dict[TopicPartition, _Entry]]] = {}
        self.loaded = False

    # --- start-up ---------------------------------------------------------------------------

    def load(self) -> None:
        """Replay ``__consumer_offsets`` into the cache (one read of every partition).

        A record that does not decode is logged and skipped (it cannot be ours, or is from
        a later version); it never stops the broker.
        """
        for partition, header, batch in self._topic.replay():
            if header.is_control:
                self.complete_transaction(
                    partition, header.producer_id, commit=control_type(batch) == COMMIT
                )
                continue
            pending = (
                self._pending.setdefault((partition, header.producer_id), {})
                if header.is_transactional
                else None
            )
            for record in decode_records(batch):
                if record.key is None:
                    continue
                try:
                    self._apply(record.key, record.value, log_offset=record.offset, into=pending)
                except (ValueError, KeyError, TypeError) as e:
                    log.warning(
                        "%s-%d offset %d: skipping record: %s",
                        OFFSETS_TOPIC,
                        partition,
                        record.offset,
                        e,
                    )
        self.loaded = True

    def _apply(
        self,
        key_bytes: bytes,
        value: bytes | None,
        *,
        log_offset: int,
        into: dict[str, dict[TopicPartition, _Entry]] | None = None,
    ) -> None:
        """Cache one record; a transactional one goes ``into`` its transaction's pending
        offsets instead (they take effect with the commit marker)."""
        key = decode_key(key_bytes)
        if into is not None:
            if isinstance(key, OffsetKey) and value is not None:
                pending = into.setdefault(key.group, {})
                pending[(key.topic, key.partition)] = _Entry(decode_offset_value(value), log_offset)
            return
        if isinstance(key, OffsetKey):
            tp = (key.topic, key.partition)
            group = self._offsets.setdefault(key.group, {})
            if value is None:
                current = group.get(tp)
                if current is not None and current.log_offset < log_offset:
                    del group[tp]
                if not group:
                    del self._offsets[key.group]
            else:
                decoded = decode_offset_value(value)
                current = group.get(tp)
                if current is None or current.log_offset < log_offset:
                    group[tp] = _Entry(decoded, log_offset)
        elif isinstance(key, GroupKey):
            held = self._groups.get(key.group)
            if held is not None and held[1] > log_offset:
                return
            if value is None:
                self._groups.pop(key.group, None)
            else:
                self._groups[key.group] = (decode_group_value(value), log_offset)

    # --- reads ------------------------------------------------------------------------------

    def fetch(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, OffsetValue]:
        """The committed offsets of ``partitions`` that have one (all of them if None)."""
        committed = self._offsets.get(group_id, {})
        if partitions is None:
            return {tp: entry.value for tp, entry in committed.items()}
        return {tp: committed[tp].value for tp in partitions if tp in committed}

    def has_offsets(self, group_id: str) -> bool:
        return bool(self._offsets.get(group_id))

    def group_ids(self) -> set[str]:
        """Every group with committed offsets or a group record."""
        return set(self._offsets) | set(self._groups)

    def group_record(self, group_id: str) -> dict[str, Any] | None:
        """The last record written with :meth:`write_group` (None if none, or deleted)."""
        held = self._groups.get(group_id)
        return None if held is None else held[0]

    def partition_of(self, group_id: str) -> int:
        return self._topic.partition_of(group_id)

    # --- writes -----------------------------------------------------------------------------

    async def commit(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetValue],
        *,
        producer: tuple[int, int] | None = None,
    ) -> None:
        """Store ``offsets`` durably (one record each, one batch, one fsync), then cache them.

        With ``producer`` (id, epoch: TxnOffsetCommit) the batch is transactional and the
        offsets stay pending until :meth:`complete_transaction` sees its marker."""
        if not offsets:
            return
        now = self._topic.clock()
        records = []
        for (topic, partition), value in offsets.items():
            if value.commit_timestamp_ms < 0:
                value = OffsetValue(
                    offset=value.offset,
                    leader_epoch=value.leader_epoch,
                    metadata=value.metadata,
                    commit_timestamp_ms=now,
                )
            key = OffsetKey(group=group_id, topic=topic, partition=partition)
            records.append((encode_key(key), encode_offset_value(value)))
        await self._write(group_id, records, producer=producer)

    async def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> None:
        """Write tombstones for the committed offsets of ``partitions`` that exist."""
        committed = self._offsets.get(group_id, {})
        records: list[tuple[bytes, bytes | None]] = [
            (encode_key(OffsetKey(group=group_id, topic=t, partition=p)), None)
            for t, p in partitions
            if (t, p) in committed
        ]
        await self._write(group_id, records)

    async def write_group(self, group_id: str, value: Mapping[str, Any]) -> None:
        """Store the group's metadata record (any JSON object; the last one wins)."""
        key = encode_key(GroupKey(group=group_id))
        await self._write(group_id, [(key, encode_group_value(dict(value)))])

    async def delete_group(self, group_id: str) -> None:
        """Tombstones for every offset of the group and for its group record."""
        records: list[tuple[bytes, bytes | None]] = [
            (encode_key(OffsetKey(group=group_id, topic=t, partition=p)), None)
            for t, p in self._offsets.get(group_id, {})
        ]
        if group_id in self._groups:
            records.append((encode_key(GroupKey(group=group_id)), None))
        await self._write(group_id, records)

    async def _write(
        self,
        group_id: str,
        records: Sequence[tuple[bytes, bytes | None]],
        *,
        producer: tuple[int, int] | None = None,
    ) -> None:
        if not records:
            return
        # A transactional commit (TxnOffsetCommit) is not fsynced here: it counts only once
        # its transaction commits, and EndTxn fsyncs every partition of the transaction
        # before deciding (riverbed.broker.txn.engine).
        appended = await self._topic.append(
            group_id, records, flush=producer is None, producer=producer
        )
        pending = None
        if producer is not None:
            key = (self.partition_of(group_id), producer[0])
            pending = self._pending.setdefault(key, {})
        for delta, (key_bytes, value) in enumerate(records):
            self._apply(key_bytes, value, log_offset=appended.base_offset + delta, into=pending)

    def partition_log(self, group_id: str) -> Log:
        """The log of the group's partition (the topic is created on first use)."""
        return self._topic.partition_log(group_id)

    # --- transactions -----------------------------------------------------------------------

    def complete_transaction(self, partition: int, producer_id: int, *, commit: bool) -> None:
        """A commit or abort marker of ``producer_id`` reached ``partition``: its pending
        offsets there take effect (commit, unless a newer plain commit of the same partition
        came after them, as Kafka compares record offsets) or are dropped (abort)."""
        pending = self._pending.pop((partition, producer_id), None)
        if not pending or not commit:
            return
        for group_id, entries in pending.items():
            group = self._offsets.setdefault(group_id, {})
            for tp, entry in entries.items():
                current = group.get(tp)
                if current is None or current.log_offset < entry.log_offset:
                    group[tp] = entry

    def has_pending(self, group_id: str, tp: TopicPartition) -> bool:
        """Whether an open transaction has committed an offset of ``tp`` for the group
        (OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT then)."""
        return any(tp in groups.get(group_id, ()) for groups in self._pending.values())
