"""Metadata (API 3): brokers, topics and partitions, creating missing topics on request."""

from __future__ import annotations

from typing import Any

from riverbed.broker.errors import error_code_for
from riverbed.broker.internal_topics import is_internal
from riverbed.broker.state import BrokerState
from riverbed.log import LogError, TopicMetadata
from riverbed.protocol import ErrorCode, Request

__all__ = ["AUTHORIZED_OPERATIONS_OMITTED", "metadata"]

# Kafka's "authorized operations not requested" sentinel (INT32_MIN).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def _broker_entries(state: BrokerState) -> list[dict[str, Any]]:
    return [
        {
            "node_id": state.config.node_id,
            "host": state.advertised.host,
            "port": state.advertised.port,
            "rack": None,
        }
    ]


def _topic_entry(state: BrokerState, topic: TopicMetadata) -> dict[str, Any]:
    node = state.config.node_id
    return {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": is_internal(topic.name),
        "partitions": [
            {
                "error_code": ErrorCode.none,
                "partition_index": index,
                "leader_id": node,
                "leader_epoch": 0,
                "replica_nodes": [node],
                "isr_nodes": [node],
                "offline_replicas": [],
            }
            for index in range(topic.partitions)
        ],
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def _error_entry(name: str | None, code: ErrorCode) -> dict[str, Any]:
    return {
        "error_code": code,
        "name": name,
        "topic_id": None,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def _lookup(
    state: BrokerState, *, name: str | None, topic_id: object, auto_create: bool
) -> dict[str, Any]:
    topics = state.logs.topics()
    if name is None:
        for topic in topics.values():
            if topic.topic_id == topic_id:
                return _topic_entry(state, topic)
        return _error_entry(None, ErrorCode.unknown_topic_id)
    if name in topics:
        return _topic_entry(state, topics[name])
    if not (auto_create and state.config.auto_create_topics_enable):
        return _error_entry(name, ErrorCode.unknown_topic_or_partition)
    try:
        created = state.logs.create_topic(name, partitions=state.config.num_partitions)
    except LogError as e:
        return _error_entry(name, error_code_for(e))
    return _topic_entry(state, created)


async def metadata(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    requested = body.topics
    # Version 0 has no allow_auto_topic_creation field and always auto-creates.
    auto_create = bool(getattr(body, "allow_auto_topic_creation", True))
    if requested is None:
        entries = [_topic_entry(state, topic) for topic in state.logs.topics().values()]
    else:
        if request.api_version == 0 and not requested:
            # Metadata v0 has no null: an empty list means "all topics".
            entries = [_topic_entry(state, topic) for topic in state.logs.topics().values()]
        else:
            entries = [
                _lookup(
                    state,
                    name=item.name,
                    topic_id=getattr(item, "topic_id", None),
                    auto_create=auto_create,
                )
                for item in requested
            ]
    return {
        "throttle_time": 0,
        "brokers": _broker_entries(state),
        "cluster_id": state.cluster_id,
        "controller_id": state.config.node_id,
        "topics": entries,
        "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }
