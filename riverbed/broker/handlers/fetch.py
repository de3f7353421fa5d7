"""Fetch (API 1): stored batches, byte for byte, with long polling.

Each partition's answer is the whole batches from the requested offset on (the log never
returns a partial batch), at most ``partition_max_bytes`` per partition and ``max_bytes`` in
all, except that the first batch of the first partition with data is returned whole even if
larger, so a consumer always makes progress (Kafka's rule since Fetch v3). If fewer than
``min_bytes`` are available the request waits in the purgatory until an append to one of its
partitions or ``max_wait_ms``, then reads again.

Zero-copy: a partition's answer is a :class:`~riverbed.log.file_records.FileRecords`, the
regions of the segment files that hold it; the connection writes the response around them
and hands the regions to the kernel with ``sendfile`` (see ``riverbed.broker.connection``).
Only the headers near the cut to whole batches are read by the broker.

Isolation: a ``read_committed`` fetch (isolation level 1) reads only below the partition's
last stable offset (the first offset of its oldest open transaction), and gets the aborted
transactions that overlap what it may read, so the client drops their records; control
batches (commit/abort markers) are sent as stored and skipped by every client.
``read_uncommitted`` reads to the high watermark and gets no aborted list.

Fetch sessions (KIP-227) are not kept: every response has ``session_id`` 0, which tells
clients that ask for a session to keep sending full requests, and an incremental request
for a session gets FETCH_SESSION_ID_NOT_FOUND so the client starts over.
"""

from __future__ import annotations

import time
from typing import Any

from riverbed.broker.errors import error_code_for
from riverbed.broker.state import BrokerState
from riverbed.log import FileRecords, LogError
from riverbed.protocol import ErrorCode, Request

__all__ = ["fetch"]

# Fetch sessions: 0 means "no session"; epoch -1 "no session wanted", 0 "create one".
NO_SESSION_ID = 0
FINAL_EPOCH = -1
READ_COMMITTED = 1


def _timeout_s(value: Any) -> float:
    seconds = value.total_seconds() if hasattr(value, "total_seconds") else value / 1000
    return max(0.0, float(seconds))


async def fetch(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    session_id = getattr(body, "session_id", NO_SESSION_ID)
    session_epoch = getattr(body, "session_epoch", FINAL_EPOCH)
    if session_id != NO_SESSION_ID and session_epoch not in (0, FINAL_EPOCH):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.fetch_session_id_not_found,
            "session_id": NO_SESSION_ID,
            "responses": [],
        }
    deadline = time.monotonic() + _timeout_s(body.max_wait)
    min_bytes = max(int(body.min_bytes), 0)
    max_bytes = int(getattr(body, "max_bytes", 2**31 - 1))
    wanted = [(topic.topic, p.partition) for topic in body.topics for p in topic.partitions]
    while True:
        responses, total_bytes, failed = _read(state, body, max_bytes)
        remaining_s = deadline - time.monotonic()
        if total_bytes >= min_bytes or failed or remaining_s <= 0 or not wanted:
            break
        _close(responses)  # not enough yet: read again after the wait
        await state.purgatory.wait(wanted, timeout_s=remaining_s)
    if total_bytes:
        for topic in responses:
            sent = sum(len(partition["records"]) for partition in topic["partitions"])
            if sent:
                state.metrics.sent(topic["topic"], sent)
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "session_id": NO_SESSION_ID,
        "responses": responses,
    }


def _close(responses: list[dict[str, Any]]) -> None:
    for topic in responses:
        for partition in topic["partitions"]:
            if isinstance(partition["records"], FileRecords):
                partition["records"].close()


def _read(state: BrokerState, body: Any, max_bytes: int) -> tuple[list[dict[str, Any]], int, bool]:
    committed = getattr(body, "isolation_level", 0) == READ_COMMITTED
    responses: list[dict[str, Any]] = []
    total_bytes = 0
    failed = False
    for topic in body.topics:
        partitions: list[dict[str, Any]] = []
        for wanted in topic.partitions:
            budget = min(int(wanted.partition_max_bytes), max(max_bytes - total_bytes, 0))
            entry = _read_partition(
                state,
                topic.topic,
                wanted.partition,
                int(wanted.fetch_offset),
                budget=budget,
                # The first batch is always whole: only the first partition with data may
                # go over the budget (the log returns one batch whatever max_bytes is).
                allow_oversize=total_bytes == 0,
                committed=committed,
            )
            failed |= entry["error_code"] != ErrorCode.none
            total_bytes += len(entry["records"] or b"")
            partitions.append(entry)
        responses.append({"topic": topic.topic, "partitions": partitions})
    return responses, total_bytes, failed


def _read_partition(
    state: BrokerState,
    topic: str,
    partition: int,
    offset: int,
    *,
    budget: int,
    allow_oversize: bool,
    committed: bool,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "partition_index": partition,
        "error_code": ErrorCode.none,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",
    }
    try:
        partition_log = state.logs.log(topic, partition)
        high_watermark = partition_log.high_watermark
        stable = partition_log.last_stable_offset
        entry.update(
            high_watermark=high_watermark,
            last_stable_offset=stable,
            log_start_offset=partition_log.log_start_offset,
        )
        limit = stable if committed else high_watermark
        if budget > 0 or allow_oversize:
            records = partition_log.read_records(offset, max_bytes=max(budget, 1), max_offset=limit)
            if not allow_oversize and len(records) > budget:
                records.close()
            else:
                entry["records"] = records
        if committed:
            entry["aborted_transactions"] = [
                {"producer_id": txn.producer_id, "first_offset": txn.first_offset}
                for txn in partition_log.aborted_transactions(offset, limit)
            ]
    except (LogError, OSError) as e:
        entry["error_code"] = error_code_for(e)
        entry["records"] = b""  # Kafka sends empty records with an error, never null
    return entry
