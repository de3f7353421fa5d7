"""The consumer protocol's (KIP-848) messages and refusals, as the state machine sees them.

:class:`Heartbeat` is one ConsumerGroupHeartbeat request, :class:`HeartbeatResult` its answer;
:class:`TopicInfo` a topic as the coordinator sees it; :class:`Expired` a member removed by a
timeout. A refusal is a :class:`ConsumerGroupError` carrying the Kafka error the client
expects as its ``error_code``; the state machine answers with these codes::

    INVALID_REQUEST             a field missing or malformed
    INVALID_REGULAR_EXPRESSION  the subscribed topic regex does not compile
    UNSUPPORTED_ASSIGNOR        a server assignor the coordinator does not have
    GROUP_ID_NOT_FOUND          no such consumer group (or a live classic group of that id)
    GROUP_MAX_SIZE_REACHED      group.consumer.max.size members already
    UNKNOWN_MEMBER_ID           rejoin with epoch 0
    FENCED_MEMBER_EPOCH         drop partitions, rejoin with epoch 0
    STALE_MEMBER_EPOCH          an offset commit with another epoch than the member's
    NON_EMPTY_GROUP             DeleteGroups of a group with members
    UNRELEASED_INSTANCE_ID      a static member's instance id still in use
    FENCED_INSTANCE_ID          another process took the instance id
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from riverbed.broker.groups.consumer.assignors import Assignment
from riverbed.protocol import ErrorCode

__all__ = [
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "NO_REBALANCE_TIMEOUT",
    "ConsumerGroupError",
    "Expired",
    "Heartbeat",
    "HeartbeatResult",
    "TopicInfo",
]

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
NO_REBALANCE_TIMEOUT = -1  # "unchanged since the last heartbeat"


class ConsumerGroupError(Exception):
    """A heartbeat, offset commit or DeleteGroups the coordinator refuses (module doc)."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        """The code the broker answers with."""


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
