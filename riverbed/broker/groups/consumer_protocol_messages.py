"""The consumer protocol's (KIP-848) messages and refusals, as the state machine sees them.

:class:`Heartbeat` is one ConsumerGroupHeartbeat request, :class:`HeartbeatResult` its answer;
:class:`TopicInfo` a topic as the coordinator sees it; :class:`Expired` a member removed by a
timeout. Refusals are exceptions, each carrying the Kafka error a client expects as its
``error_code``::

    ConsumerGroupError
    ├── InvalidRequestError          INVALID_REQUEST: a field missing or malformed
    ├── InvalidRegularExpressionError INVALID_REGULAR_EXPRESSION
    ├── UnsupportedAssignorError     UNSUPPORTED_ASSIGNOR
    ├── GroupIdNotFoundError         GROUP_ID_NOT_FOUND: no such consumer group
    ├── GroupMaxSizeReachedError     GROUP_MAX_SIZE_REACHED
    ├── UnknownMemberIdError         UNKNOWN_MEMBER_ID: rejoin with epoch 0
    ├── FencedMemberEpochError       FENCED_MEMBER_EPOCH: drop partitions, rejoin with epoch 0
    ├── StaleMemberEpochError        STALE_MEMBER_EPOCH (offset commits)
    ├── NonEmptyGroupError           NON_EMPTY_GROUP (DeleteGroups)
    ├── UnreleasedInstanceIdError    UNRELEASED_INSTANCE_ID: instance id still in use
    └── FencedInstanceIdError        FENCED_INSTANCE_ID: another process took the instance id
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from riverbed.broker.groups.consumer_protocol_assignors import Assignment
from riverbed.protocol import ErrorCode

__all__ = [
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "NO_REBALANCE_TIMEOUT",
    "ConsumerGroupError",
    "Expired",
    "FencedInstanceIdError",
    "FencedMemberEpochError",
    "GroupIdNotFoundError",
    "GroupMaxSizeReachedError",
    "Heartbeat",
    "HeartbeatResult",
    "InvalidRegularExpressionError",
    "InvalidRequestError",
    "NonEmptyGroupError",
    "StaleMemberEpochError",
    "TopicInfo",
    "UnknownMemberIdError",
    "UnreleasedInstanceIdError",
    "UnsupportedAssignorError",
]

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
NO_REBALANCE_TIMEOUT = -1  # "unchanged since the last heartbeat"


class ConsumerGroupError(Exception):
    """A heartbeat or offset request the coordinator refuses; see the module docstring."""

    error_code: ErrorCode = ErrorCode.unknown_server_error
    """The code the broker answers with (each subclass names its own)."""


class InvalidRequestError(ConsumerGroupError):
    error_code = ErrorCode.invalid_request


class InvalidRegularExpressionError(ConsumerGroupError):
    error_code = ErrorCode.invalid_regular_expression


class UnsupportedAssignorError(ConsumerGroupError):
    error_code = ErrorCode.unsupported_assignor


class GroupIdNotFoundError(ConsumerGroupError):
    error_code = ErrorCode.group_id_not_found


class GroupMaxSizeReachedError(ConsumerGroupError):
    error_code = ErrorCode.group_max_size_reached


class UnknownMemberIdError(ConsumerGroupError):
    error_code = ErrorCode.unknown_member_id


class FencedMemberEpochError(ConsumerGroupError):
    error_code = ErrorCode.fenced_member_epoch


class StaleMemberEpochError(ConsumerGroupError):
    error_code = ErrorCode.stale_member_epoch


class NonEmptyGroupError(ConsumerGroupError):
    error_code = ErrorCode.non_empty_group


class UnreleasedInstanceIdError(ConsumerGroupError):
    error_code = ErrorCode.unreleased_instance_id


class FencedInstanceIdError(ConsumerGroupError):
    error_code = ErrorCode.fenced_instance_id


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicInfo:
    """A topic as the coordinator sees it (from the broker's topic metadata)."""

    name: str
    topic_id: uuid.UUID
    partitions: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    """One ConsumerGroupHeartbeat request; ``None`` fields are "unchanged since last time"."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = NO_REBALANCE_TIMEOUT
    subscribed_topic_names: Sequence[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatResult:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Assignment | None = None
    """The member's whole current assignment, when it changed or the request was full."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Expired:
    group_id: str
    member_id: str
    reason: str
