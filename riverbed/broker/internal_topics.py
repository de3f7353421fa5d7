"""The broker's internal topics: created on first use, read back whole at start-up.

``__consumer_offsets`` (committed offsets, groups) and ``__transaction_state`` (transaction
coordinator) are compacted topics the broker writes itself and replays into memory when it
starts; clients cannot produce to them (Produce answers INVALID_TOPIC_EXCEPTION).
"""

from __future__ import annotations

from collections.abc import Iterator

from riverbed.log.batch import BatchHeader, iter_batches
from riverbed.log.errors import LogError
from riverbed.log.log import Log
from riverbed.log.manager import LogManager

__all__ = ["INTERNAL_TOPICS", "OFFSETS_TOPIC", "TRANSACTION_STATE_TOPIC", "ensure_topic"]

OFFSETS_TOPIC = "__consumer_offsets"
"""Kafka's name for the internal topic of committed offsets and group metadata."""
TRANSACTION_STATE_TOPIC = "__transaction_state"
"""Kafka's name for the transaction coordinator's log."""
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
READ_CHUNK_BYTES = 1 << 20


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
