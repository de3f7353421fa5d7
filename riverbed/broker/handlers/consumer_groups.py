"""ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69): ``group.protocol=consumer``.

The groups themselves are :class:`riverbed.broker.groups.consumer_protocol.ConsumerGroups`, a
pure state machine; this module feeds it requests, the broker's topics and the clock, and
runs its timers: after every heartbeat the next session or rebalance deadline is (re)armed
with ``loop.call_at``, and :meth:`ConsumerGroups.expire` runs when it comes. There is one
``ConsumerGroups`` per broker (per ``LogManager``), created on first use and reached with
:func:`consumer_groups_for`, which the classic coordinator and the offset handlers use to
tell consumer-protocol groups apart.

Membership is kept in memory: after a restart a member's heartbeat gets UNKNOWN_MEMBER_ID and
librdkafka rejoins at once with epoch 0; committed offsets live in the offset store.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from riverbed.broker.groups import consumer_protocol as cp
from riverbed.broker.groups.consumer_protocol_assignors import Assignment
from riverbed.broker.state import BrokerState
from riverbed.log.manager import LogManager
from riverbed.protocol import ErrorCode, Request

__all__ = [
    "commit_error",
    "consumer_groups_for",
    "describe",
    "heartbeat",
    "set_classic_group_check",
]

log = logging.getLogger(__name__)

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
MEMBER_TYPE_CONSUMER = 1  # ConsumerGroupDescribe v1: 0 classic, 1 consumer, -1 unknown

_ERROR_CODES: tuple[tuple[type[cp.ConsumerGroupError], ErrorCode], ...] = (
    (cp.InvalidRequestError, ErrorCode.invalid_request),
    (cp.InvalidRegularExpressionError, ErrorCode.invalid_regular_expression),
    (cp.UnsupportedAssignorError, ErrorCode.unsupported_assignor),
    (cp.GroupIdNotFoundError, ErrorCode.group_id_not_found),
    (cp.GroupMaxSizeReachedError, ErrorCode.group_max_size_reached),
    (cp.UnknownMemberIdError, ErrorCode.unknown_member_id),
    (cp.FencedMemberEpochError, ErrorCode.fenced_member_epoch),
    (cp.StaleMemberEpochError, ErrorCode.stale_member_epoch),
    (cp.NonEmptyGroupError, ErrorCode.non_empty_group),
    (cp.UnreleasedInstanceIdError, ErrorCode.unreleased_instance_id),
    (cp.FencedInstanceIdError, ErrorCode.fenced_instance_id),
)


def error_code_for(exc: cp.ConsumerGroupError) -> ErrorCode:
    """The Kafka error code of a refusal by the consumer-protocol coordinator."""
    for exc_type, code in _ERROR_CODES:
        if isinstance(exc, exc_type):
            return code
    return ErrorCode.unknown_server_error


@dataclass(slots=True)
class _Runtime:
    groups: cp.ConsumerGroups
    timer: asyncio.TimerHandle | None = None
    timer_deadline_ms: int | None = None


_RUNTIMES: weakref.WeakKeyDictionary[LogManager, _Runtime] = weakref.WeakKeyDictionary()


def _no_classic_groups(state: BrokerState, group_id: str) -> bool:
    return False


_classic_group_check: Callable[[BrokerState, str], bool] = _no_classic_groups


def set_classic_group_check(check: Callable[[BrokerState, str], bool]) -> None:
    """Install how to ask whether a classic group of that id has members or offsets.

    Kafka keeps one group type per group id: a consumer-protocol heartbeat for a non-empty
    classic group gets GROUP_ID_NOT_FOUND ("not a consumer group").
    """
    global _classic_group_check
    _classic_group_check = check


def _topics(logs: LogManager) -> Callable[[], Mapping[str, cp.TopicInfo]]:
    def topics() -> Mapping[str, cp.TopicInfo]:
        # Internal topics (__consumer_offsets, ...) are never subscribed to, not even by regex.
        return {
            name: cp.TopicInfo(name=name, topic_id=t.topic_id, partitions=t.partitions)
            for name, t in logs.topics().items()
            if not name.startswith("__")
        }

    return topics


def consumer_groups_for(state: BrokerState) -> cp.ConsumerGroups:
    """This broker's consumer-protocol groups (created empty on first use)."""
    return _runtime(state).groups


def _runtime(state: BrokerState) -> _Runtime:
    runtime = _RUNTIMES.get(state.logs)
    if runtime is None:
        config = state.config
        groups = cp.ConsumerGroups(
            topics=_topics(state.logs),
            session_timeout_ms=config.group_consumer_session_timeout_ms,
            heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            max_size=config.group_consumer_max_size,
        )
        runtime = _RUNTIMES[state.logs] = _Runtime(groups)
    return runtime


def _arm_timer(state: BrokerState, runtime: _Runtime) -> None:
    """Make sure :meth:`ConsumerGroups.expire` runs at the next deadline."""
    deadline = runtime.groups.next_deadline_ms()
    if deadline is None or deadline == runtime.timer_deadline_ms:
        return
    if runtime.timer is not None:
        runtime.timer.cancel()
    loop = asyncio.get_running_loop()
    delay_s = max(0.0, (deadline - state.clock()) / 1000)

    def fire() -> None:
        runtime.timer = runtime.timer_deadline_ms = None
        for expired in runtime.groups.expire(now_ms=state.clock()):
            log.info(
                "group %s: member %s removed: %s",
                expired.group_id,
                expired.member_id,
                expired.reason,
            )
        _arm_timer(state, runtime)

    # A TimerHandle, not a task: a broker that stops simply drops it with its loop.
    runtime.timer = loop.call_later(delay_s, fire)
    runtime.timer_deadline_ms = deadline


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


def _ms(value: Any) -> int:
    """A kio ``timedelta_i32`` field in milliseconds (-1 stays -1)."""
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


async def heartbeat(state: BrokerState, request: Request) -> dict[str, Any]:
    body = request.body
    member_id = body.member_id
    if request.api_version == 0 and not member_id and body.member_epoch == 0:
        member_id = str(uuid.uuid4())  # v0: the coordinator names new members
    runtime = _runtime(state)
    try:
        if body.member_epoch == 0 and _classic_group_check(state, body.group_id):
            raise cp.GroupIdNotFoundError(f"group {body.group_id} is not a consumer group")
        result = runtime.groups.heartbeat(
            cp.Heartbeat(
                group_id=body.group_id,
                member_id=member_id,
                member_epoch=body.member_epoch,
                instance_id=body.instance_id,
                rack_id=body.rack_id,
                rebalance_timeout_ms=_ms(body.rebalance_timeout),
                subscribed_topic_names=body.subscribed_topic_names,
                subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None),
                server_assignor=body.server_assignor,
                owned=_owned(body.topic_partitions),
                client_id=request.client_id or "",
            ),
            now_ms=state.clock(),
        )
    except cp.ConsumerGroupError as e:
        return {
            "throttle_time": 0,
            "error_code": error_code_for(e),
            "error_message": str(e),
            "member_id": None,
            "member_epoch": 0,
            "heartbeat_interval": 0,
            "assignment": None,
        }
    finally:
        _arm_timer(state, runtime)
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


async def describe(state: BrokerState, request: Request) -> dict[str, Any]:
    groups = consumer_groups_for(state)
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
                    "group_state": "Dead",
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


def commit_error(
    state: BrokerState, group_id: str, *, member_id: str, member_epoch: int
) -> ErrorCode | None:
    """How an OffsetCommit to ``group_id`` fares if it is a consumer-protocol group.

    ``None``: it is not one (the classic coordinator decides); ``ErrorCode.none``: store the
    offsets; else the error for every partition (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID).
    The member epoch arrives in the commit's generation field (any OffsetCommit version).
    """
    groups = consumer_groups_for(state)
    if group_id not in groups:
        return None
    try:
        groups.validate_offset_commit(group_id, member_id=member_id, member_epoch=member_epoch)
    except cp.ConsumerGroupError as e:
        return error_code_for(e)
    return ErrorCode.none
