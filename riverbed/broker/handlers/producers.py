"""InitProducerId (API 22) for idempotent producers.

A producer without a transactional id gets a fresh producer id, epoch 0, from the log
manager's persistent allocator, so ids are never reused across restarts. A producer that
sends its current id and epoch (v3+, KIP-360: after an unknown-producer or sequence error)
gets the same id with the next epoch, which restarts its sequences at 0 on every partition;
at the last epoch it gets a new id instead, as Kafka does.
"""

from __future__ import annotations

from typing import Any

from riverbed.broker.state import BrokerState
from riverbed.protocol import ErrorCode, Request

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 2**15 - 1  # producer_epoch is an int16


async def handle(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    if body.transactional_id is not None:
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.transactional_id_authorization_failed,
            "producer_id": NO_PRODUCER_ID,
            "producer_epoch": NO_PRODUCER_EPOCH,
        }
    producer_id = getattr(body, "producer_id", NO_PRODUCER_ID)
    epoch = getattr(body, "producer_epoch", NO_PRODUCER_EPOCH)
    if producer_id != NO_PRODUCER_ID and 0 <= epoch < MAX_EPOCH - 1:
        new_id, new_epoch = producer_id, epoch + 1
    else:
        new_id, new_epoch = state.logs.allocate_producer_id(), 0
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "producer_id": new_id,
        "producer_epoch": new_epoch,
    }
