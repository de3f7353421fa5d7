"""InitProducerId (API 22) for idempotent and transactional producers.

A transactional id goes to the transaction coordinator (``riverbed.broker.txn``), which
keeps its producer id and fences older instances by bumping the epoch.

A producer without a transactional id gets a fresh producer id, epoch 0, from the log
manager's persistent allocator, so ids are never reused across restarts. A producer that
sends its current id and epoch (v3+, KIP-360: after an unknown-producer or sequence error)
gets the same id with the next epoch, which restarts its sequences at 0 on every partition;
at the last epoch it gets a new id instead, as Kafka does.
"""

from __future__ import annotations

from typing import Any

from riverbed.broker.handlers.transactions import fenced_for
from riverbed.broker.state import BrokerState
from riverbed.protocol import ErrorCode, Request, milliseconds

__all__ = ["init_producer_id"]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 2**15 - 1  # producer_epoch is an int16


async def init_producer_id(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    if body.transactional_id is not None:
        code, txn_producer_id, txn_epoch = await state.txns.init_producer_id(
            body.transactional_id,
            timeout_ms=milliseconds(body.transaction_timeout),
            producer_id=getattr(body, "producer_id", NO_PRODUCER_ID),
            producer_epoch=getattr(body, "producer_epoch", NO_PRODUCER_EPOCH),
        )
        return {
            "throttle_time": 0,
            "error_code": fenced_for(code, request.api_version, since=4),
            "producer_id": txn_producer_id,
            "producer_epoch": txn_epoch,
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
