"""The broker's internal topics: created on first use, read back whole at start-up.

``__consumer_offsets`` (committed offsets, groups) and ``__transaction_state`` (transaction
coordinator) are compacted topics the broker writes itself and replays into memory when it
starts; clients cannot produce to them (Produce answers INVALID_TOPIC_EXCEPTION).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from riverbed.log import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    AppendResult,
    BatchHeader,
    Log,
    LogError,
    LogManager,
    SimpleRecord,
    build_batch,
    iter_batches,
)

__all__ = [
    "INTERNAL_TOPICS",
    "OFFSETS_TOPIC",
    "TRANSACTION_STATE_TOPIC",
    "Flush",
    "InternalTopic",
    "decode_json_object",
    "encode_json",
    "ensure_topic",
    "is_internal",
    "java_string_hash",
    "partition_for",
]

Flush = Callable[[Iterable[Log]], Awaitable[None]]
"""Returns once everything appended to the logs is fsynced (the broker's GroupFlusher)."""

OFFSETS_TOPIC = "__consumer_offsets"
"""Kafka's name for the internal topic of committed offsets and group metadata."""
TRANSACTION_STATE_TOPIC = "__transaction_state"
"""Kafka's name for the transaction coordinator's log."""
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
DEFAULT_PARTITIONS = 50
"""Kafka's offsets.topic.num.partitions and transaction.state.log.num.partitions."""
DEFAULT_SEGMENT_BYTES = 104_857_600
"""Kafka's offsets.topic.segment.bytes and transaction.state.log.segment.bytes (100 MiB)."""
READ_CHUNK_BYTES = 1 << 20


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: s[0]*31^(n-1) + ... over UTF-16 code units, as int32."""
    h = 0
    encoded = text.encode("utf-16-be")
    for i in range(0, len(encoded), 2):
        h = (31 * h + ((encoded[i] << 8) | encoded[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(key: str, *, partitions: int) -> int:
    """The partition of a group or transactional id (Kafka's ``partitionFor``)."""
    h = java_string_hash(key)
    magnitude = 0 if h == -(2**31) else abs(h)
    return magnitude % partitions


def encode_json(document: Mapping[str, Any]) -> bytes:
    """A record key or value of an internal topic: compact UTF-8 JSON, keys in the order
    given, so that the same identity always gives the same key bytes (compaction keeps the
    last record per key)."""
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()


def decode_json_object(data: bytes, *, what: str) -> dict[str, Any]:
    """The JSON object in ``data``; ValueError if it is not one (``what`` names it)."""
    document = json.loads(data)
    if not isinstance(document, dict):
        raise ValueError(f"{what} is not a JSON object: {bytes(data[:80])!r}")
    return document


def is_internal(topic: str) -> bool:
    """Kafka's internal topics (clients cannot produce to or delete them)."""
    return topic in INTERNAL_TOPICS


def ensure_topic(logs: LogManager, name: str, *, partitions: int, segment_bytes: int) -> int:
    """Create the compacted internal topic ``name`` if missing; its real partition count
    (an existing topic keeps its count, so a changed setting never moves a key)."""
    if name not in logs.topics():
        try:
            logs.create_topic(
                name,
                partitions=partitions,
                configs={"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)},
            )
        except LogError:
            if name not in logs.topics():
                raise
    return logs.topics()[name].partitions


def read_batches(partition_log: Log) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Every batch of ``partition_log`` up to its high watermark, in order (one linear read
    in chunks of READ_CHUNK_BYTES)."""
    offset = partition_log.log_start_offset
    end = partition_log.high_watermark
    while offset < end:
        chunk = partition_log.read(offset, max_bytes=READ_CHUNK_BYTES)
        if not chunk:
            return
        for position, header in iter_batches(chunk):
            offset = header.last_offset + 1
            yield header, memoryview(chunk)[position : position + header.size]


class InternalTopic:
    """One internal topic as its owner (a coordinator) uses it: a key's partition is
    ``abs(java_hash(key)) % partitions`` (Kafka's ``partitionFor``), records are appended
    in one batch per call, and the whole topic is replayed at start-up.

    The topic is created on first write with ``partitions`` partitions; if it exists, its
    real partition count is used, so a changed setting never moves a key.
    """

    def __init__(
        self,
        logs: LogManager,
        name: str,
        *,
        flush: Flush,
        clock: Callable[[], int],
        partitions: int = DEFAULT_PARTITIONS,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    ) -> None:
        self.name = name
        self.clock = clock
        """The broker's clock (epoch milliseconds), which stamps every record appended."""
        self._logs = logs
        self._flush = flush
        self._partitions = partitions
        self._segment_bytes = segment_bytes

    def partition_of(self, key: str) -> int:
        return partition_for(key, partitions=self._partitions)

    def partition_log(self, key: str) -> Log:
        """The log of ``key``'s partition (the topic is created on first use)."""
        self._partitions = ensure_topic(
            self._logs, self.name, partitions=self._partitions, segment_bytes=self._segment_bytes
        )
        return self._logs.log(self.name, self.partition_of(key))

    async def append(
        self,
        key: str,
        records: Sequence[tuple[bytes, bytes | None]],
        *,
        flush: bool = True,
        producer: tuple[int, int] | None = None,
    ) -> AppendResult:
        """Append ``records`` (key bytes, value bytes or None) in one batch to ``key``'s
        partition, fsynced before returning if ``flush``; transactional for ``producer``
        (id, epoch). Raises LogError/OSError if it could not."""
        partition_log = self.partition_log(key)
        now = self.clock()
        producer_id, epoch = (NO_PRODUCER_ID, NO_PRODUCER_EPOCH) if producer is None else producer
        batch = build_batch(
            [SimpleRecord(key=k, value=v, timestamp_ms=now) for k, v in records],
            base_timestamp=now,
            producer_id=producer_id,
            producer_epoch=epoch,
            is_transactional=producer is not None,
        )
        appended = partition_log.append(batch)
        if flush:
            await self._flush([partition_log])
        return appended

    def replay(self) -> Iterator[tuple[int, BatchHeader, memoryview]]:
        """(partition, header, batch) of every batch in the topic, partition by partition."""
        topic = self._logs.topics().get(self.name)
        if topic is None:
            return
        self._partitions = topic.partitions
        for partition in range(topic.partitions):
            for header, batch in read_batches(self._logs.log(self.name, partition)):
                yield partition, header, batch
