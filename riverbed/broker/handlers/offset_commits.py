"""Committed offsets: OffsetCommit (8), OffsetFetch (9) and OffsetDelete (47).

Validation against the group and the durable store are the coordinator's
(:meth:`~riverbed.broker.groups.GroupCoordinator.commit_offsets`); here: the wire shapes
(OffsetFetch v8 batches groups, older versions answer one group at the top level), the
per-partition checks Kafka makes before the coordinator (the partition must exist, the
metadata string must fit ``offset.metadata.max.bytes``), and storage errors to codes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from riverbed.broker.errors import error_code_for
from riverbed.broker.groups import OffsetValue
from riverbed.broker.groups.offset_store import TopicPartition
from riverbed.broker.state import BrokerState
from riverbed.log import LogError
from riverbed.protocol import ErrorCode, Request

__all__ = [
    "offset_commit",
    "offset_delete",
    "offset_fetch",
    "partition_errors",
    "requested_offsets",
]

OFFSET_METADATA_MAX_BYTES = 4096
"""Kafka's offset.metadata.max.bytes default."""
NO_OFFSET = -1
NO_LEADER_EPOCH = -1


def partition_exists(state: BrokerState, topic: str, partition: int) -> bool:
    metadata = state.logs.topics().get(topic)
    return metadata is not None and 0 <= partition < metadata.partitions


def requested_offsets(
    state: BrokerState, topics: Any
) -> tuple[dict[TopicPartition, OffsetValue], dict[TopicPartition, ErrorCode]]:
    """The offsets an OffsetCommit or TxnOffsetCommit asks to store, and the partitions
    refused before the coordinator sees them (unknown, metadata too large)."""
    offsets: dict[TopicPartition, OffsetValue] = {}
    codes: dict[TopicPartition, ErrorCode] = {}
    for topic in topics:
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            metadata = p.committed_metadata
            if not partition_exists(state, topic.name, p.partition_index):
                codes[tp] = ErrorCode.unknown_topic_or_partition
            elif metadata is not None and len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                codes[tp] = ErrorCode.offset_metadata_too_large
            else:
                offsets[tp] = OffsetValue(
                    offset=p.committed_offset,
                    leader_epoch=getattr(p, "committed_leader_epoch", NO_LEADER_EPOCH),
                    metadata=metadata,
                )
    return offsets, codes


async def offset_commit(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    offsets, codes = requested_offsets(state, body.topics)
    if offsets:
        try:
            code = await state.groups.commit_offsets(
                group_id=body.group_id,
                generation_id=body.generation_id_or_member_epoch,
                member_id=body.member_id,
                group_instance_id=getattr(body, "group_instance_id", None),
                offsets=offsets,
            )
        except (LogError, OSError) as e:
            code = error_code_for(e)
        codes.update(dict.fromkeys(offsets, code))
    return {"throttle_time": 0, "topics": partition_errors(body.topics, codes)}


def partition_errors(
    topics: Any, codes: Mapping[TopicPartition, ErrorCode]
) -> list[dict[str, Any]]:
    """The per-partition answer of OffsetCommit and TxnOffsetCommit, in request order."""
    return [
        {
            "name": topic.name,
            "partitions": [
                {
                    "partition_index": p.partition_index,
                    "error_code": codes[(topic.name, p.partition_index)],
                }
                for p in topic.partitions
            ],
        }
        for topic in topics
    ]


def _fetch_group(
    state: BrokerState, group_id: str, topics: Any, *, require_stable: bool
) -> dict[str, Any]:
    """One group's answer; ``topics`` None means every partition with a committed offset.

    With ``require_stable`` (v7+, read_committed consumers) a partition whose offset an
    open transaction has committed answers UNSTABLE_OFFSET_COMMIT (the client retries), so
    a consumer never starts from an offset that may yet be rolled back."""
    wanted: list[TopicPartition] | None = None
    if topics is not None:
        wanted = [(t.name, p) for t in topics for p in t.partition_indexes]
    code, committed = state.groups.fetch_offsets(group_id, wanted)
    if wanted is None:
        wanted = sorted(committed)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, partition in wanted:
        value = committed.get((topic, partition))
        partition_code = code
        if require_stable and state.groups.store.has_pending(group_id, (topic, partition)):
            value, partition_code = None, ErrorCode.unstable_offset_commit
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "committed_offset": NO_OFFSET if value is None else value.offset,
                "committed_leader_epoch": NO_LEADER_EPOCH if value is None else value.leader_epoch,
                "metadata": "" if value is None else value.metadata,
                # v1 has no group-level error code: loading is reported per partition.
                "error_code": partition_code,
            }
        )
    return {
        "group_id": group_id,
        "error_code": code,
        "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
    }


async def offset_fetch(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    stable = bool(getattr(body, "require_stable", False))
    if hasattr(body, "groups"):  # v8+: several groups
        return {
            "throttle_time": 0,
            "groups": [
                _fetch_group(state, g.group_id, g.topics, require_stable=stable)
                for g in body.groups
            ],
        }
    answer = _fetch_group(state, body.group_id, body.topics, require_stable=stable)
    return {"throttle_time": 0, "topics": answer["topics"], "error_code": answer["error_code"]}


async def offset_delete(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    codes: dict[TopicPartition, ErrorCode] = {}
    wanted: list[TopicPartition] = []
    for topic in body.topics:
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if partition_exists(state, topic.name, p.partition_index):
                wanted.append(tp)
            else:
                codes[tp] = ErrorCode.unknown_topic_or_partition
    try:
        group_code, results = await state.groups.delete_offsets(body.group_id, wanted)
    except (LogError, OSError) as e:
        group_code, results = error_code_for(e), {}
    codes.update(results)
    if group_code != ErrorCode.none:
        return {"throttle_time": 0, "error_code": group_code, "topics": []}
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "topics": [
            {
                "name": topic.name,
                "partitions": [
                    {
                        "partition_index": p.partition_index,
                        "error_code": codes.get((topic.name, p.partition_index), ErrorCode.none),
                    }
                    for p in topic.partitions
                ],
            }
            for topic in body.topics
        ],
    }
