"""One consumer-protocol (KIP-848) group: its members, epochs, target and partition owners.

A plain record that :class:`~riverbed.broker.groups.consumer.state_machine.ConsumerGroups`
changes; it keeps its own indexes consistent (static members by instance id, the member
owning each partition) and derives the group state Kafka reports (``Empty``, ``Assigning``,
``Reconciling``, ``Stable``).
"""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from riverbed.broker.groups.consumer.assignors import Assignment
from riverbed.broker.groups.consumer.reconcile import MemberAssignment

if TYPE_CHECKING:
    from riverbed.broker.groups.consumer.messages import Heartbeat, TopicInfo

__all__ = ["ConsumerGroup", "ConsumerGroupState", "Member"]

# Kafka's default rebalance timeout when a client gives none (the Java client's default
# max.poll.interval.ms); librdkafka always sends its max.poll.interval.ms when joining.
DEFAULT_REBALANCE_TIMEOUT_MS = 300_000


class ConsumerGroupState(enum.Enum):
    """As ListGroups/DescribeGroups report a consumer-protocol group (Kafka's names)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"
    """Deleted, or never existed (ConsumerGroupDescribe of an unknown id)."""


@dataclass(slots=True, kw_only=True)
class Member:
    """One member: what it sent last and where its assignment stands."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = DEFAULT_REBALANCE_TIMEOUT_MS
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    assignment: MemberAssignment = field(default_factory=MemberAssignment)
    session_deadline_ms: int = 0
    rebalance_deadline_ms: int | None = None

    def update_from(self, request: Heartbeat) -> None:
        """Take the fields the heartbeat set (``None``/-1 mean "unchanged")."""
        if request.instance_id is not None:
            self.instance_id = request.instance_id
        if request.rack_id is not None:
            self.rack_id = request.rack_id
        if request.rebalance_timeout_ms >= 0:
            self.rebalance_timeout_ms = request.rebalance_timeout_ms
        if request.subscribed_topic_names is not None:
            self.subscribed_topic_names = tuple(sorted(set(request.subscribed_topic_names)))
        if request.subscribed_topic_regex is not None:
            # librdkafka sends "" for "no regex" (it has only topic names).
            self.subscribed_topic_regex = request.subscribed_topic_regex or None
        if request.server_assignor is not None:
            self.server_assignor = request.server_assignor
        self.client_id = request.client_id
        self.client_host = request.client_host


@dataclass(slots=True, kw_only=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, Member] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    """Each member's target assignment, as of ``assignment_epoch``."""
    metadata: dict[str, TopicInfo] = field(default_factory=dict)
    """The subscribed topics that exist, as of the last group epoch bump."""
    _static: dict[str, str] = field(default_factory=dict)
    _owners: dict[tuple[uuid.UUID, int], str] = field(default_factory=dict)

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(
            not m.assignment.is_reconciled_to(self.assignment_epoch)
            for m in self.members.values()
            if m.assignment.member_epoch >= 0
        ):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def static_member(self, instance_id: str) -> Member | None:
        member_id = self._static.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def owner_of(self, topic_id: uuid.UUID, partition: int) -> str | None:
        return self._owners.get((topic_id, partition))

    def deadlines(self) -> Iterator[int]:
        for member in self.members.values():
            yield member.session_deadline_ms
            if member.rebalance_deadline_ms is not None:
                yield member.rebalance_deadline_ms

    def put(self, member: Member) -> None:
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self._static[member.instance_id] = member.member_id

    def set_owner(self, member: Member) -> None:
        """Record the member as owner of what it holds (assigned or pending revocation)."""
        self._release(member.member_id)
        held = (member.assignment.assigned, member.assignment.pending_revocation)
        for assignment in held:
            for topic_id, partitions in assignment.items():
                for partition in partitions:
                    self._owners[(topic_id, partition)] = member.member_id

    def _release(self, member_id: str) -> None:
        for key in [k for k, owner in self._owners.items() if owner == member_id]:
            del self._owners[key]

    def remove(self, member: Member) -> None:
        self.members.pop(member.member_id, None)
        self.target.pop(member.member_id, None)
        if member.instance_id is not None and self._static.get(member.instance_id) == (
            member.member_id
        ):
            del self._static[member.instance_id]
        self._release(member.member_id)

    def replace(self, old: Member, *, new_member_id: str) -> Member:
        """A static member's new process takes over ``old``'s partitions and target."""
        target = self.target.get(old.member_id)
        self.remove(old)
        new = replace(
            old,
            member_id=new_member_id,
            assignment=replace(old.assignment, member_epoch=0, previous_member_epoch=0),
        )
        if target is not None:
            self.target[new_member_id] = target
        self.put(new)
        self.set_owner(new)
        return new

    def subscribed_names(self, member: Member, topics: Mapping[str, TopicInfo]) -> set[str]:
        """The existing topics the member subscribes to, by name or by its regex."""
        names = {name for name in member.subscribed_topic_names if name in topics}
        if member.subscribed_topic_regex:
            pattern = re.compile(member.subscribed_topic_regex)
            names.update(name for name in topics if pattern.fullmatch(name))
        return names

    def subscription_metadata(self, topics: Mapping[str, TopicInfo]) -> dict[str, TopicInfo]:
        """The subscribed topics that exist, with their ids and partition counts."""
        names: set[str] = set()
        for member in self.members.values():
            names |= self.subscribed_names(member, topics)
        return {name: topics[name] for name in sorted(names)}
