"""ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69): ``group.protocol=consumer``.

Thin translations between the wire and the broker's
:class:`~riverbed.broker.groups.GroupCoordinator`, which owns the consumer-protocol groups
(:class:`~riverbed.broker.groups.consumer.ConsumerGroups`, a pure state machine) beside the
classic ones, and runs their session and rebalance timers.

Membership is kept in memory: after a restart a member's heartbeat gets UNKNOWN_MEMBER_ID and
librdkafka rejoins at once with epoch 0; committed offsets live in the offset store.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from riverbed.broker.groups.consumer import (
    Assignment,
    ConsumerGroupError,
    ConsumerGroupState,
    Heartbeat,
)
from riverbed.broker.handlers.metadata import AUTHORIZED_OPERATIONS_OMITTED
from riverbed.broker.state import BrokerState
from riverbed.protocol import ErrorCode, Request, milliseconds

__all__ = ["consumer_group_describe", "consumer_group_heartbeat"]

MEMBER_TYPE_CONSUMER = 1  # ConsumerGroupDescribe v1: 0 classic, 1 consumer, -1 unknown


def _owned(topic_partitions: Any) -> Assignment | None:
    if topic_partitions is None:
        return None
    owned: dict[uuid.UUID, frozenset[int]] = {}
    for item in topic_partitions:
        if item.topic_id is not None:
            owned[item.topic_id] = owned.get(item.topic_id, frozenset()) | frozenset(
                item.partitions
            )
    return owned


async def consumer_group_heartbeat(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    member_id = body.member_id
    if request.api_version == 0 and not member_id and body.member_epoch == 0:
        member_id = str(uuid.uuid4())  # v0: the coordinator names new members
    try:
        result = state.groups.consumer_heartbeat(
            Heartbeat(
                group_id=body.group_id,
                member_id=member_id,
                member_epoch=body.member_epoch,
                instance_id=body.instance_id,
                rack_id=body.rack_id,
                rebalance_timeout_ms=milliseconds(body.rebalance_timeout),
                subscribed_topic_names=body.subscribed_topic_names,
                subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None),
                server_assignor=body.server_assignor,
                owned=_owned(body.topic_partitions),
                client_id=request.client_id or "",
            )
        )
    except ConsumerGroupError as e:
        return {
            "throttle_time": 0,
            "error_code": e.error_code,
            "error_message": str(e),
            "member_id": None,
            "member_epoch": 0,
            "heartbeat_interval": 0,
            "assignment": None,
        }
    assignment = None
    if result.assignment is not None:
        assignment = {
            "topic_partitions": [
                {"topic_id": topic_id, "partitions": sorted(partitions)}
                for topic_id, partitions in sorted(result.assignment.items())
                if partitions
            ]
        }
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "member_id": result.member_id,
        "member_epoch": result.member_epoch,
        "heartbeat_interval": result.heartbeat_interval_ms,
        "assignment": assignment,
    }


def _assignment_entry(assignment: Assignment, names: Mapping[uuid.UUID, str]) -> dict[str, Any]:
    return {
        "topic_partitions": [
            {"topic_id": topic_id, "topic_name": names[topic_id], "partitions": sorted(parts)}
            for topic_id, parts in sorted(assignment.items())
            if parts and topic_id in names
        ]
    }


async def consumer_group_describe(state: BrokerState, request: Request) -> dict[str, Any]:
    groups = state.groups.consumer
    names = {t.topic_id: name for name, t in state.logs.topics().items()}
    described = []
    for group_id in request.body.group_ids:
        group = groups.get(group_id)
        if group is None:
            described.append(
                {
                    "error_code": ErrorCode.group_id_not_found,
                    "error_message": f"Group {group_id} is not a consumer group.",
                    "group_id": group_id,
                    "group_state": ConsumerGroupState.DEAD.value,
                    "members": [],
                    "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
                }
            )
            continue
        members = [
            {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "rack_id": m.rack_id,
                "member_epoch": m.assignment.member_epoch,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex,
                "assignment": _assignment_entry(m.assignment.assigned, names),
                "target_assignment": _assignment_entry(group.target.get(m.member_id, {}), names),
                "member_type": MEMBER_TYPE_CONSUMER,
            }
            for m in group.members.values()
        ]
        described.append(
            {
                "error_code": ErrorCode.none,
                "error_message": None,
                "group_id": group_id,
                "group_state": group.state.value,
                "group_epoch": group.group_epoch,
                "assignment_epoch": group.assignment_epoch,
                "assignor_name": groups.assignor_name(group),
                "members": members,
                "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
            }
        )
    return {"throttle_time": 0, "groups": described}
