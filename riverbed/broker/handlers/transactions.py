"""The transactional APIs: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
TxnOffsetCommit (28), DescribeTransactions (65) and ListTransactions (66).

InitProducerId with a transactional id is in :mod:`riverbed.broker.handlers.init_producer_id`.
The state machine is the coordinator's (:mod:`riverbed.broker.txn`); here are the wire
shapes and one rule of Kafka's (KIP-588): clients older than InitProducerId v4 /
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn v2 / TxnOffsetCommit v3 do not know
PRODUCER_FENCED and get INVALID_PRODUCER_EPOCH instead.

AddPartitionsToTxn v4+ (brokers verifying for each other, KIP-890) is not served: with one
broker, Produce asks the coordinator directly.
"""

from __future__ import annotations

import re
from typing import Any

from riverbed.broker.errors import error_code_for
from riverbed.broker.handlers.offset_commits import partition_errors, requested_offsets
from riverbed.broker.internal_topics import OFFSETS_TOPIC
from riverbed.broker.state import BrokerState
from riverbed.broker.txn import TxnState
from riverbed.log import LogError
from riverbed.protocol import ErrorCode, Request

__all__ = [
    "add_offsets_to_txn",
    "add_partitions_to_txn",
    "describe_transactions",
    "end_txn",
    "fenced_for",
    "list_transactions",
    "txn_offset_commit",
]

KAFKA_STATES = frozenset(
    {s.value for s in TxnState} | {"Dead", "PrepareEpochFence"}  # Kafka's, never held here
)


def fenced_for(code: ErrorCode, version: int, *, since: int) -> ErrorCode:
    """PRODUCER_FENCED as a client of this ``version`` understands it (KIP-588)."""
    if code == ErrorCode.producer_fenced and version < since:
        return ErrorCode.invalid_producer_epoch
    return code


async def add_partitions_to_txn(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body  # v0-3: one transaction, fields named v3_and_below_*
    wanted = [(t.name, p) for t in body.v3_and_below_topics for p in t.partitions]
    codes = await state.txns.add_partitions(
        body.v3_and_below_transactional_id,
        producer_id=body.v3_and_below_producer_id,
        producer_epoch=body.v3_and_below_producer_epoch,
        partitions=wanted,
    )
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, partition in wanted:
        code = fenced_for(codes[(topic, partition)], request.api_version, since=2)
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "partition_error_code": code}
        )
    return {
        "throttle_time": 0,
        "results_by_topic_v3_and_below": [
            {"name": name, "results_by_partition": results} for name, results in by_topic.items()
        ],
    }


async def add_offsets_to_txn(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    try:
        state.groups.store.partition_log(body.group_id)  # creates __consumer_offsets
        partition = state.groups.store.partition_of(body.group_id)
    except (LogError, OSError) as e:
        return {"throttle_time": 0, "error_code": error_code_for(e)}
    code = await state.txns.add_offsets(
        body.transactional_id,
        producer_id=body.producer_id,
        producer_epoch=body.producer_epoch,
        partition=partition,
    )
    return {"throttle_time": 0, "error_code": fenced_for(code, request.api_version, since=2)}


async def end_txn(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    code = await state.txns.end_txn(
        body.transactional_id,
        producer_id=body.producer_id,
        producer_epoch=body.producer_epoch,
        commit=body.committed,
    )
    return {"throttle_time": 0, "error_code": fenced_for(code, request.api_version, since=2)}


async def txn_offset_commit(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    group_id = body.group_id
    offsets, codes = requested_offsets(state, body.topics)
    if offsets:
        code = state.txns.verify(
            body.transactional_id,
            producer_id=body.producer_id,
            producer_epoch=body.producer_epoch,
            tp=(OFFSETS_TOPIC, state.groups.store.partition_of(group_id)),
        )
        if code == ErrorCode.invalid_producer_epoch:
            code = ErrorCode.producer_fenced
        if code == ErrorCode.none:
            try:
                code = await state.groups.commit_offsets(
                    group_id=group_id,
                    generation_id=getattr(body, "generation_id", -1),
                    member_id=getattr(body, "member_id", ""),
                    group_instance_id=getattr(body, "group_instance_id", None),
                    offsets=offsets,
                    producer=(body.producer_id, body.producer_epoch),
                )
            except (LogError, OSError) as e:
                code = error_code_for(e)
            else:  # fsynced by the commit, which waits for it (riverbed.broker.txn.engine)
                state.flusher.soon([state.groups.store.partition_log(group_id)])
        code = fenced_for(code, request.api_version, since=3)
        codes.update(dict.fromkeys(offsets, code))
    return {"throttle_time": 0, "topics": partition_errors(body.topics, codes)}


async def describe_transactions(state: BrokerState, request: Request) -> dict[str, Any]:
    answers = []
    for transactional_id in request.body.transactional_ids:
        meta = state.txns.describe(transactional_id) if state.txns.loaded else None
        entry: dict[str, Any] = {
            "error_code": ErrorCode.none,
            "transactional_id": transactional_id,
            "transaction_state": "",
            "transaction_timeout": 0,
            "transaction_start_time": 0,
            "producer_id": -1,
            "producer_epoch": -1,
            "topics": [],
        }
        if not state.txns.loaded:
            entry["error_code"] = ErrorCode.coordinator_load_in_progress
        elif meta is None:
            entry["error_code"] = ErrorCode.transactional_id_not_found
        else:
            by_topic: dict[str, list[int]] = {}
            if meta.state is TxnState.ONGOING or meta.state.is_prepare:
                for topic, partition in sorted(meta.partitions):
                    by_topic.setdefault(topic, []).append(partition)
            entry.update(
                transaction_state=meta.state.value,
                transaction_timeout=meta.timeout_ms,
                transaction_start_time=meta.start_ms,
                producer_id=meta.producer_id,
                producer_epoch=meta.producer_epoch,
                topics=[{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            )
        answers.append(entry)
    return {"throttle_time": 0, "transaction_states": answers}


async def list_transactions(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    if not state.txns.loaded:
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.coordinator_load_in_progress,
            "unknown_state_filters": [],
            "transaction_states": [],
        }
    wanted = list(body.state_filters)
    pattern = getattr(body, "transactional_id_pattern", None)
    try:
        matcher = re.compile(pattern) if pattern else None
    except re.error:
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.invalid_request,
            "unknown_state_filters": [],
            "transaction_states": [],
        }
    listed = [
        meta
        for meta in state.txns.list_transactions(
            states=[s for s in wanted if s in KAFKA_STATES],
            producer_ids=body.producer_id_filters,
            min_duration_ms=getattr(body, "duration_filter", -1),
        )
        if matcher is None or matcher.fullmatch(meta.transactional_id)
    ]
    unknown = [s for s in wanted if s not in KAFKA_STATES]
    if unknown and len(unknown) == len(wanted):
        listed = []  # only unknown states asked for: nothing matches (Kafka's rule)
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "unknown_state_filters": unknown,
        "transaction_states": [
            {
                "transactional_id": meta.transactional_id,
                "producer_id": meta.producer_id,
                "transaction_state": meta.state.value,
            }
            for meta in sorted(listed, key=lambda m: m.transactional_id)
        ],
    }
