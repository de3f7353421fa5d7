"""A classic consumer group's state: its members, generation, protocol and state name.

This module is data plus the rules that need no clock: protocol selection and the
validity checks of a join. The transitions themselves (and every timer) live in
:mod:`riverbed.broker.groups.classic.rebalance`.

States (Kafka's ``ClassicGroupState``, the names DescribeGroups and ListGroups report)::

    Empty ──join──> PreparingRebalance ──all joined / timeout──> CompletingRebalance
      ^                 ^      ^                                     │ leader's SyncGroup
      │                 │      └──── member joins, leaves, expires ──┤
      └── last member ──┘                                            v
          leaves                          Stable <────────────────────┘
    Dead: deleted (or expired); a Dead group object is never reused.
"""

from __future__ import annotations

import asyncio
import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from riverbed.broker.groups.classic.subscription import subscription_topics
from riverbed.protocol import ErrorCode

__all__ = ["ClassicGroup", "GroupState", "JoinResult", "Member", "SyncResult"]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinResult:
    """The answer to one JoinGroup (fields of JoinGroupResponse)."""

    error_code: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    """(member_id, group_instance_id, metadata) — for the leader only."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncResult:
    error_code: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(slots=True, kw_only=True)
class Member:
    """One member of a classic group."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    """(name, metadata) in the member's order of preference."""
    assignment: bytes = b""
    join_waiter: asyncio.Future[JoinResult] | None = None
    sync_waiter: asyncio.Future[SyncResult] | None = None
    is_new: bool = False
    """Joined during the current rebalance and not yet answered (Kafka's ``isNew``)."""
    last_heartbeat_ms: int = 0

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None and not self.join_waiter.done()

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_waiter is not None and not self.sync_waiter.done()

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols


@dataclass(slots=True, kw_only=True)
class ClassicGroup:
    """A group using the classic protocol (JoinGroup/SyncGroup/Heartbeat)."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int = 0
    """When the group entered its current state (offset expiry of empty groups uses it)."""
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending_members: set[str] = field(default_factory=set)
    """Member ids handed out with MEMBER_ID_REQUIRED, not yet joined with them."""
    static_members: dict[str, str] = field(default_factory=dict)
    """group_instance_id -> member_id."""
    new_member_added: bool = False
    """A member joined during the initial rebalance delay (so the delay is extended)."""

    def transition(self, state: GroupState, *, now_ms: int) -> None:
        self.state = state
        self.state_timestamp_ms = now_ms

    def is_empty(self) -> bool:
        return not self.members

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        instance = member.group_instance_id
        if instance is not None and self.static_members.get(instance) == member_id:
            del self.static_members[instance]
        if self.leader_id == member_id:
            self.leader_id = next(
                (m.member_id for m in self.members.values() if m.awaiting_join),
                next(iter(self.members), None),
            )
        return member

    def all_members_joined(self) -> bool:
        """Every member has rejoined and no one handed a new member id is still to come."""
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def supported_protocols(self) -> Counter[str]:
        """How many members support each protocol name."""
        counts: Counter[str] = Counter()
        for member in self.members.values():
            counts.update({name for name, _ in member.protocols})
        return counts

    def accepts(self, *, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Kafka's ``isValidJoin``: same protocol type, and a protocol every member has."""
        if not protocol_type or not protocols:
            return False
        if self.is_empty():
            return True
        if protocol_type != self.protocol_type:
            return False
        counts = self.supported_protocols()
        everyone = len(self.members)
        return any(counts[name] == everyone for name, _ in protocols)

    def select_protocol(self) -> str:
        """The protocol to use: one every member supports, by the members' votes (each
        votes for its most preferred candidate); ties go to the leader's preference."""
        counts = self.supported_protocols()
        everyone = len(self.members)
        candidates = {name for name, n in counts.items() if n == everyone}
        if not candidates:
            raise ValueError("no protocol is supported by every member")
        votes: Counter[str] = Counter()
        for member in self.members.values():
            votes[next(name for name, _ in member.protocols if name in candidates)] += 1
        leader = self.members.get(self.leader_id or "")
        preference = [name for name, _ in leader.protocols] if leader else sorted(candidates)
        return max(
            candidates,
            key=lambda name: (
                votes[name],
                -preference.index(name) if name in preference else -len(preference),
            ),
        )

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members of a "consumer" group subscribe to; None if unknown."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = subscription_topics(member.metadata_for(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return topics

    def record(self) -> dict[str, Any]:
        """The group metadata record's value (format:
        :mod:`riverbed.broker.groups.offsets_topic_records`)."""
        return {
            "protocol_type": self.protocol_type or "",
            "generation": self.generation_id,
            "protocol": self.protocol_name,
            "leader": self.leader_id,
            "state_timestamp": self.state_timestamp_ms,
        }
