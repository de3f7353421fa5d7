"""Produce (API 0): append each partition's batch as received; acks 0, 1 and all.

The batch bytes go to the log untouched but for the offsets patched into its header (see
``riverbed.log``). With ``acks=all`` the response waits for the group flusher, so an
acknowledged batch is on stable storage; with ``acks=1`` it is acknowledged once written;
with ``acks=0`` no response is sent at all, as the protocol says. A transactional batch is
answered without waiting: it counts only if its transaction commits, and the commit fsyncs
it before the decision is written (:mod:`riverbed.broker.txn.engine`); the flusher's next
round is asked to start on it meanwhile.

Transactional batches (a request with a ``transactional_id``) are checked with the
transaction coordinator first: the producer's epoch must be current and the partition
added to its open transaction (:meth:`~riverbed.broker.txn.TransactionCoordinator.verify`),
else the partition answers that error and nothing is written. A transactional batch without
a transactional id is refused (INVALID_RECORD).
"""

from __future__ import annotations

import logging
from typing import Any

from riverbed.broker.errors import error_code_for
from riverbed.broker.internal_topics import is_internal
from riverbed.broker.state import BrokerState
from riverbed.log import Log, LogError, parse_header
from riverbed.protocol import ErrorCode, Request

__all__ = ["produce"]

log = logging.getLogger(__name__)

ACKS_NONE, ACKS_LEADER, ACKS_ALL = 0, 1, -1


def _partition_result(index: int, code: ErrorCode, message: str | None = None) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": code,
        "base_offset": -1,
        "log_append_time": -1,
        "log_start_offset": -1,
        "record_errors": [],
        "error_message": message,
    }


async def produce(state: BrokerState, request: Request) -> dict[str, Any] | None:
    body = request.body
    acks = body.acks
    if acks not in (ACKS_NONE, ACKS_LEADER, ACKS_ALL):
        return _respond_all(body, ErrorCode.invalid_required_acks, f"acks={acks}")

    responses: list[dict[str, Any]] = []
    written: list[Log] = []
    results: list[dict[str, Any]] = []
    for topic in body.topic_data:
        partitions: list[dict[str, Any]] = []
        for data in topic.partition_data:
            result = _append(
                state, body.transactional_id, topic.name, data.index, data.records, written
            )
            partitions.append(result)
            results.append(result)
        responses.append({"name": topic.name, "partition_responses": partitions})

    # Transactional data is fsynced by its commit (EndTxn fsyncs every partition of the
    # transaction before the decision is written): until then it counts for nothing, and a
    # machine crash aborts it. Waiting here too put a second fsync on each transaction's path.
    if body.transactional_id is not None:
        state.flusher.soon(written)
    elif acks == ACKS_ALL and written:
        try:
            await state.flusher.flushed(written)
        except OSError as e:
            log.error("fsync failed: %s", e)
            for result in results:
                if result["error_code"] == ErrorCode.none:
                    result.update(
                        error_code=ErrorCode.kafka_storage_error,
                        base_offset=-1,
                        error_message=f"fsync failed: {e}",
                    )
    if acks == ACKS_NONE:
        return None
    return {"responses": responses, "throttle_time": 0}


def _append(
    state: BrokerState,
    transactional_id: str | None,
    topic: str,
    index: int,
    records: bytes | None,
    written: list[Log],
) -> dict[str, Any]:
    if records is None or not records:
        return _partition_result(index, ErrorCode.corrupt_message, "no record batch")
    if is_internal(topic):  # Kafka: "Cannot append to internal topic"
        return _partition_result(index, ErrorCode.invalid_topic_exception, "internal topic")
    refused = _check_transaction(state, transactional_id, topic, index, records)
    if refused is not None:
        return refused
    try:
        partition_log = state.logs.log(topic, index)
        appended = partition_log.append(records)
    except (LogError, OSError) as e:
        return _partition_result(index, error_code_for(e), str(e))
    # A duplicate's original may not be on disk yet either: acks=all waits for it too.
    written.append(partition_log)
    if not appended.duplicate:
        state.purgatory.notify((topic, index))
        state.metrics.appended(topic, len(records), appended.last_offset - appended.base_offset + 1)
    return {
        "index": index,
        "error_code": ErrorCode.none,
        "base_offset": appended.base_offset,
        "log_append_time": appended.log_append_time_ms,
        "log_start_offset": appended.log_start_offset,
        "record_errors": [],
        "error_message": None,
    }


def _check_transaction(
    state: BrokerState, transactional_id: str | None, topic: str, index: int, records: bytes
) -> dict[str, Any] | None:
    """The answer refusing a transactional batch the coordinator does not expect, or None."""
    try:
        header = parse_header(records)
    except LogError:
        return None  # the log refuses it with the right error
    if transactional_id is None:
        if header.is_transactional:
            message = "transactional records need a transactional id"
            return _partition_result(index, ErrorCode.invalid_record, message)
        return None
    if not header.is_transactional:
        return None  # plain data: the log refuses it while the producer has a transaction open
    code = state.txns.verify(
        transactional_id,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        tp=(topic, index),
    )
    if code == ErrorCode.none:
        return None
    return _partition_result(index, code, f"transaction {transactional_id!r}: {code.name}")


def _respond_all(body: Any, code: ErrorCode, message: str) -> dict[str, Any]:
    return {
        "responses": [
            {
                "name": topic.name,
                "partition_responses": [
                    _partition_result(data.index, code, message) for data in topic.partition_data
                ],
            }
            for topic in body.topic_data
        ],
        "throttle_time": 0,
    }
