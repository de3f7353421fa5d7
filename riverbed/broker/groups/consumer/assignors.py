"""Server-side partition assignors of the consumer group protocol (KIP-848).

With ``group.protocol=consumer`` the coordinator, not a group leader, computes the *target
assignment*: which partitions each member should own. An assignor is pure: no clock, no I/O,
and the same answer for the same input (members and partitions are visited in sorted order),
so recomputing it at every group epoch never shuffles partitions for nothing.

- ``uniform`` (Kafka's default, ``UniformAssignor``): every member gets as close to the same
  number of partitions as its subscriptions allow, and keeps the partitions it already had
  whenever that does not unbalance the group, so a rebalance moves as few partitions as
  possible. When all members subscribe to the same topics, loads differ by at most one.
- ``range`` (Kafka's ``RangeAssignor``): per topic, consecutive ranges of partitions to the
  subscribed members in member-id order, so co-partitioned topics land on the same member.

Kafka picks the assignor a member names in ``group.remote.assignor`` (the most common name
among the members wins); with none named, the first of ``group.consumer.assignors``
(``uniform``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "ASSIGNORS",
    "DEFAULT_ASSIGNOR",
    "Assignment",
    "Assignor",
    "MemberSubscription",
    "RangeAssignor",
    "UniformAssignor",
]

Assignment = Mapping[uuid.UUID, frozenset[int]]
"""Partitions by topic id; a topic with no partitions is left out."""

_TopicPartition = tuple[uuid.UUID, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberSubscription:
    """What an assignor knows of one member."""

    topic_ids: frozenset[uuid.UUID]
    """The topics the member subscribes to that exist."""
    previous: Assignment
    """The member's previous target assignment (what stickiness tries to keep)."""


class Assignor(Protocol):
    name: str

    def assign(
        self, members: Mapping[str, MemberSubscription], partitions: Mapping[uuid.UUID, int]
    ) -> dict[str, Assignment]:
        """The target assignment of every member, given each topic's partition count."""
        ...


def _as_assignment(owned: list[_TopicPartition]) -> Assignment:
    by_topic: dict[uuid.UUID, set[int]] = {}
    for topic_id, partition in owned:
        by_topic.setdefault(topic_id, set()).add(partition)
    return {topic_id: frozenset(parts) for topic_id, parts in by_topic.items()}


class UniformAssignor:
    """Balanced and sticky: see the module docstring."""

    name = "uniform"

    def assign(
        self, members: Mapping[str, MemberSubscription], partitions: Mapping[uuid.UUID, int]
    ) -> dict[str, Assignment]:
        member_ids = sorted(members)
        eligible: dict[uuid.UUID, list[str]] = {
            topic_id: [m for m in member_ids if topic_id in members[m].topic_ids]
            for topic_id in sorted(partitions)
        }
        owner: dict[_TopicPartition, str] = {}
        owned: dict[str, list[_TopicPartition]] = {m: [] for m in member_ids}
        # 1. Keep every previous partition that still exists and is still subscribed to.
        for member_id in member_ids:
            subscription = members[member_id]
            for topic_id, previous in sorted(subscription.previous.items()):
                if topic_id not in subscription.topic_ids or topic_id not in partitions:
                    continue
                for partition in sorted(previous):
                    key = (topic_id, partition)
                    if partition < partitions[topic_id] and key not in owner:
                        owner[key] = member_id
                        owned[member_id].append(key)
        # 2. Give each free partition to the least loaded member that may have it; the
        # partitions with the fewest candidates go first so they are not crowded out.
        free = [
            (topic_id, partition)
            for topic_id, count in partitions.items()
            if eligible[topic_id]
            for partition in range(count)
            if (topic_id, partition) not in owner
        ]
        free.sort(key=lambda key: (len(eligible[key[0]]), key))
        for key in free:
            chosen = min(eligible[key[0]], key=lambda m: (len(owned[m]), m))
            owner[key] = chosen
            owned[chosen].append(key)
        # 3. Move partitions from the most to the least loaded members while that narrows the
        # gap. Each move lowers the sum of squared loads, so this ends.
        while self._move_one(member_ids, members, owned):
            pass
        return {m: _as_assignment(owned[m]) for m in member_ids}

    @staticmethod
    def _move_one(
        member_ids: list[str],
        members: Mapping[str, MemberSubscription],
        owned: dict[str, list[_TopicPartition]],
    ) -> bool:
        by_load = sorted(member_ids, key=lambda m: (-len(owned[m]), m))
        for giver in by_load:
            for taker in reversed(by_load):
                if len(owned[giver]) - len(owned[taker]) <= 1:
                    break
                movable = [key for key in owned[giver] if key[0] in members[taker].topic_ids]
                if movable:
                    key = max(movable)
                    owned[giver].remove(key)
                    owned[taker].append(key)
                    return True
        return False


class RangeAssignor:
    """Per topic, consecutive partition ranges in member-id order (not sticky)."""

    name = "range"

    def assign(
        self, members: Mapping[str, MemberSubscription], partitions: Mapping[uuid.UUID, int]
    ) -> dict[str, Assignment]:
        owned: dict[str, list[_TopicPartition]] = {m: [] for m in members}
        for topic_id, count in sorted(partitions.items()):
            subscribers = sorted(m for m in members if topic_id in members[m].topic_ids)
            if not subscribers:
                continue
            per_member, extra = divmod(count, len(subscribers))
            start = 0
            for index, member_id in enumerate(subscribers):
                size = per_member + (1 if index < extra else 0)
                owned[member_id].extend((topic_id, p) for p in range(start, start + size))
                start += size
        return {m: _as_assignment(parts) for m, parts in owned.items()}


ASSIGNORS: Mapping[str, Assignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}
DEFAULT_ASSIGNOR = "uniform"  # the first of Kafka's default group.consumer.assignors
