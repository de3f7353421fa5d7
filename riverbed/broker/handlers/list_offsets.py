"""ListOffsets (API 2): earliest, latest, by timestamp, and the largest timestamp.

A ``read_committed`` client (isolation level 1, v2+) sees the log up to the last stable
offset only: "latest" is the LSO, and a timestamp lookup never answers an offset at or past
it (Kafka's ``fetchOffsetForTimestamp`` with ``lastFetchableOffset``).
"""

from __future__ import annotations

from typing import Any

from riverbed.broker.errors import error_code_for
from riverbed.broker.state import BrokerState
from riverbed.log import Log, LogError
from riverbed.protocol import ErrorCode, Request

__all__ = ["list_offsets"]

# Kafka's special timestamps (ListOffsetsRequest.LATEST_TIMESTAMP etc.).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4  # KIP-405: the same as earliest without tiered storage
LATEST_TIERED_TIMESTAMP = -5  # KIP-1005: nothing is tiered, so the log start
UNKNOWN = -1


READ_COMMITTED = 1


def _lookup(partition_log: Log, timestamp: int, *, committed: bool) -> tuple[int, int]:
    """(timestamp, offset) Kafka answers for this target timestamp."""
    end = partition_log.last_stable_offset if committed else partition_log.high_watermark
    if timestamp == LATEST_TIMESTAMP:
        return UNKNOWN, end
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP, LATEST_TIERED_TIMESTAMP):
        return UNKNOWN, partition_log.log_start_offset
    if timestamp == MAX_TIMESTAMP:
        found = partition_log.max_timestamp_offset()
    else:
        found = partition_log.offset_for_timestamp(timestamp)
    if found is None or found[0] >= end:
        return UNKNOWN, UNKNOWN
    offset, record_timestamp = found
    return record_timestamp, offset


async def list_offsets(state: BrokerState, request: Request) -> dict[str, Any]:
    topics: list[dict[str, Any]] = []
    committed = getattr(request.body, "isolation_level", 0) == READ_COMMITTED
    for topic in request.body.topics:
        partitions: list[dict[str, Any]] = []
        for wanted in topic.partitions:
            entry: dict[str, Any] = {
                "partition_index": wanted.partition_index,
                "error_code": ErrorCode.none,
                "timestamp": UNKNOWN,
                "offset": UNKNOWN,
                "leader_epoch": 0,
            }
            try:
                partition_log = state.logs.log(topic.name, wanted.partition_index)
                entry["timestamp"], entry["offset"] = _lookup(
                    partition_log, wanted.timestamp, committed=committed
                )
            except (LogError, OSError) as e:
                entry["error_code"] = error_code_for(e)
            partitions.append(entry)
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}
