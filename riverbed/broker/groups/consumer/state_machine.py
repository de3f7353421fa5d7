"""Consumer groups of the next-generation rebalance protocol (KIP-848), as a pure state machine.

A member joins, stays and leaves with ConsumerGroupHeartbeat only; the coordinator computes
the partition assignment itself. The moving parts, per group:

- the **group epoch**, bumped whenever the group changes in a way that may change the
  assignment: a member joins, leaves or changes its subscription, or a subscribed topic
  appears, disappears or gains partitions;
- the **target assignment** (what each member should own), recomputed by the group's assignor
  (:mod:`~riverbed.broker.groups.consumer.assignors`) when the group epoch is ahead of the
  assignment epoch;
- each member's **member epoch** and current assignment, moved towards the target one
  heartbeat at a time so that no partition is ever owned twice
  (:mod:`~riverbed.broker.groups.consumer.reconcile`).

Members heartbeat every ``heartbeat_interval_ms`` (the coordinator tells them, Kafka's
``group.consumer.heartbeat.interval.ms``); one not heard from for ``session_timeout_ms``
(``group.consumer.session.timeout.ms``), or that does not revoke partitions within its own
rebalance timeout (the client's ``max.poll.interval.ms``), is removed by :meth:`expire`. A
member leaves with epoch -1; a static member (``group.instance.id``) may leave with epoch -2,
keeping its partitions for a new process with the same instance id until its session expires.

No I/O and no clock: the caller passes ``now_ms`` and calls :meth:`ConsumerGroups.expire`
when :meth:`ConsumerGroups.next_deadline_ms` comes. State lives in memory only; after a
broker restart members get UNKNOWN_MEMBER_ID and rejoin (their committed offsets are in the
offset store, not here).

Requests, answers and refusals (:class:`ConsumerGroupError`, each with its Kafka error code)
are the values of :mod:`~riverbed.broker.groups.consumer.messages`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from riverbed.broker.groups.consumer.assignors import (
    ASSIGNORS,
    DEFAULT_ASSIGNOR,
    Assignor,
    MemberSubscription,
)
from riverbed.broker.groups.consumer.group import ConsumerGroup, Member
from riverbed.broker.groups.consumer.messages import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    NO_REBALANCE_TIMEOUT,
    ConsumerGroupError,
    Expired,
    Heartbeat,
    HeartbeatResult,
    TopicInfo,
)
from riverbed.broker.groups.consumer.reconcile import MemberState, assignment_equal, reconcile
from riverbed.protocol import ErrorCode

__all__ = ["ConsumerGroups"]

E = ErrorCode


@dataclass(slots=True, kw_only=True)
class ConsumerGroups:
    """Every consumer-protocol group of one coordinator."""

    topics: Callable[[], Mapping[str, TopicInfo]]
    """The topics members may subscribe to (internal topics left out), by name."""
    session_timeout_ms: int = 45_000  # Kafka's group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # Kafka's group.consumer.heartbeat.interval.ms
    max_size: int = 2**31 - 1  # Kafka's group.consumer.max.size
    assignors: Mapping[str, Assignor] = field(default_factory=lambda: ASSIGNORS)
    default_assignor: str = DEFAULT_ASSIGNOR
    _groups: dict[str, ConsumerGroup] = field(default_factory=dict)

    # -- reading ---------------------------------------------------------------------------

    def __contains__(self, group_id: object) -> bool:
        return group_id in self._groups

    def __iter__(self) -> Iterator[ConsumerGroup]:
        return iter(list(self._groups.values()))

    def get(self, group_id: str) -> ConsumerGroup | None:
        return self._groups.get(group_id)

    def _existing(self, group_id: str) -> ConsumerGroup:
        group = self._groups.get(group_id)
        if group is None:
            raise ConsumerGroupError(E.group_id_not_found, f"consumer group {group_id} not found")
        return group

    def next_deadline_ms(self) -> int | None:
        """When :meth:`expire` next has something to do, or ``None``."""
        deadlines = [d for group in self._groups.values() for d in group.deadlines()]
        return min(deadlines, default=None)

    # -- heartbeats -----------------------------------------------------------------------

    def heartbeat(self, request: Heartbeat, *, now_ms: int) -> HeartbeatResult:
        """Serve one ConsumerGroupHeartbeat; raises a :class:`ConsumerGroupError`."""
        self._validate(request)
        if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._leave(request)
        joining = request.member_epoch == 0
        if joining:
            group = self._groups.get(request.group_id) or ConsumerGroup(group_id=request.group_id)
        else:
            group = self._existing(request.group_id)
        member = self._member_for(group, request, joining=joining)
        self._groups[group.group_id] = group
        old_subscription = (member.subscribed_topic_names, member.subscribed_topic_regex)
        member.update_from(request)
        is_new = member.member_id not in group.members
        group.put(member)
        topics = self.topics()
        metadata = group.subscription_metadata(topics)
        changed = (
            is_new
            or old_subscription != (member.subscribed_topic_names, member.subscribed_topic_regex)
            or metadata != group.metadata
        )
        if changed:
            group.group_epoch += 1
            group.metadata = metadata
        if group.group_epoch > group.assignment_epoch:
            self._update_target(group, topics)
        before = member.assignment
        member.assignment = reconcile(
            before,
            member_id=member.member_id,
            target_epoch=group.assignment_epoch,
            target=group.target.get(member.member_id, {}),
            owned=request.owned,
            partition_owner=group.owner_of,
        )
        group.set_owner(member)
        after = member.assignment
        member.session_deadline_ms = now_ms + self.session_timeout_ms
        if after.state is not MemberState.UNREVOKED_PARTITIONS:
            member.rebalance_deadline_ms = None
        elif before.state is not MemberState.UNREVOKED_PARTITIONS or before != after:
            member.rebalance_deadline_ms = now_ms + member.rebalance_timeout_ms
        full = joining or (
            request.rebalance_timeout_ms != NO_REBALANCE_TIMEOUT
            and request.subscribed_topic_names is not None
            and request.owned is not None
        )
        send = full or not assignment_equal(before.assigned, after.assigned)
        return HeartbeatResult(
            member_id=member.member_id,
            member_epoch=after.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            assignment=dict(after.assigned) if send else None,
        )

    def _validate(self, request: Heartbeat) -> None:
        """Kafka's checks (``throwIfConsumerGroupHeartbeatRequestIsInvalid``)."""
        if not request.group_id:
            raise ConsumerGroupError(E.invalid_request, "GroupId can't be empty.")
        if request.instance_id == "":
            raise ConsumerGroupError(E.invalid_request, "InstanceId can't be empty.")
        if request.rack_id == "":
            raise ConsumerGroupError(E.invalid_request, "RackId can't be empty.")
        if not request.member_id:
            raise ConsumerGroupError(E.invalid_request, "MemberId can't be empty.")
        epoch = request.member_epoch
        if epoch == 0:
            if request.rebalance_timeout_ms == NO_REBALANCE_TIMEOUT:
                raise ConsumerGroupError(
                    E.invalid_request, "RebalanceTimeoutMs must be provided in first request."
                )
            if request.owned is None or any(request.owned.values()):
                raise ConsumerGroupError(
                    E.invalid_request, "TopicPartitions must be empty when (re-)joining."
                )
            if not request.subscribed_topic_names and not request.subscribed_topic_regex:
                raise ConsumerGroupError(
                    E.invalid_request,
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
                )
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if request.instance_id is None:
                raise ConsumerGroupError(E.invalid_request, "InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_MEMBER_EPOCH:
            raise ConsumerGroupError(E.invalid_request, "MemberEpoch is invalid.")
        if request.subscribed_topic_regex:
            try:
                re.compile(request.subscribed_topic_regex)
            except re.error as e:
                raise ConsumerGroupError(
                    E.invalid_regular_expression, f"{request.subscribed_topic_regex!r}: {e}"
                ) from None
        if request.server_assignor is not None and request.server_assignor not in self.assignors:
            raise ConsumerGroupError(
                E.unsupported_assignor,
                f"ServerAssignor {request.server_assignor} is not supported. "
                f"Supported assignors: {', '.join(self.assignors)}.",
            )

    def _member_for(self, group: ConsumerGroup, request: Heartbeat, *, joining: bool) -> Member:
        """The member this heartbeat is from, created or taken over when joining."""
        instance_id = request.instance_id
        static = group.static_member(instance_id) if instance_id is not None else None
        if instance_id is not None and joining and static is not None:
            if static.member_id == request.member_id:
                return static
            if static.assignment.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise ConsumerGroupError(
                    E.unreleased_instance_id,
                    f"static member {instance_id} of group {group.group_id} has not left",
                )
            # A new process of a static member that left with epoch -2: it takes over the
            # previous member's partitions and target without a rebalance.
            return group.replace(static, new_member_id=request.member_id)
        if instance_id is not None and not joining:
            self._static_member(group, instance_id, member_id=request.member_id)
        member = group.members.get(request.member_id)
        if member is None:
            if not joining:
                raise ConsumerGroupError(
                    E.unknown_member_id,
                    f"member {request.member_id} is not in group {group.group_id}",
                )
            if len(group.members) >= self.max_size:
                raise ConsumerGroupError(
                    E.group_max_size_reached, f"group {group.group_id} has {self.max_size} members"
                )
            return Member(member_id=request.member_id)
        if not joining:
            self._check_epoch(member, request)
        # Epoch 0 from a known member: it lost its partitions and rejoins (KAFKA-19233).
        return member

    @staticmethod
    def _static_member(group: ConsumerGroup, instance_id: str, *, member_id: str) -> Member:
        """The static member of ``instance_id``, which the heartbeat's ``member_id`` must be."""
        static = group.static_member(instance_id)
        if static is None:
            raise ConsumerGroupError(
                E.unknown_member_id, f"instance {instance_id} is not in group {group.group_id}"
            )
        if static.member_id != member_id:
            raise ConsumerGroupError(
                E.fenced_instance_id,
                f"instance {instance_id} belongs to member {static.member_id}",
            )
        return static

    @staticmethod
    def _check_epoch(member: Member, request: Heartbeat) -> None:
        """Kafka's ``throwIfConsumerGroupMemberEpochIsInvalid``."""
        current = member.assignment
        received = request.member_epoch
        if received > current.member_epoch:
            raise ConsumerGroupError(
                E.fenced_member_epoch,
                f"member epoch {received} is ahead of the coordinator's {current.member_epoch}",
            )
        if received < current.member_epoch:
            # The response that carried the new epoch may have been lost: accept the previous
            # epoch if the member owns no partition outside its current assignment.
            owned = request.owned
            subset = owned is not None and all(
                parts <= current.assigned.get(topic_id, frozenset())
                for topic_id, parts in owned.items()
            )
            if received != current.previous_member_epoch or not subset:
                raise ConsumerGroupError(
                    E.fenced_member_epoch,
                    f"member epoch {received} is behind the coordinator's {current.member_epoch}",
                )

    def _update_target(self, group: ConsumerGroup, topics: Mapping[str, TopicInfo]) -> None:
        subscriptions = {
            member_id: MemberSubscription(
                topic_ids=frozenset(
                    topics[name].topic_id for name in group.subscribed_names(member, topics)
                ),
                previous=group.target.get(member_id, {}),
            )
            for member_id, member in group.members.items()
        }
        partitions = {info.topic_id: info.partitions for info in group.metadata.values()}
        assignor = self.assignors[self.assignor_name(group)]
        group.target = assignor.assign(subscriptions, partitions)
        group.assignment_epoch = group.group_epoch

    def assignor_name(self, group: ConsumerGroup) -> str:
        """The assignor most members asked for, else the default (Kafka's rule)."""
        named = Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
        if not named:
            return self.default_assignor
        return min(named, key=lambda name: (-named[name], name))

    # -- leaving and expiry ---------------------------------------------------------------

    def _leave(self, request: Heartbeat) -> HeartbeatResult:
        group = self._existing(request.group_id)
        if request.instance_id is None:
            member = group.members.get(request.member_id)
            if member is None:
                raise ConsumerGroupError(
                    E.unknown_member_id, f"member {request.member_id} is not in the group"
                )
        else:
            member = self._static_member(group, request.instance_id, member_id=request.member_id)
            if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                # Temporarily gone: the partitions stay reserved until the session expires.
                member.assignment = member.assignment.with_epoch(
                    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                    state=MemberState.STABLE,
                    pending_revocation={},
                )
                member.rebalance_deadline_ms = None
                group.set_owner(member)
                return HeartbeatResult(
                    member_id=member.member_id,
                    member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                    heartbeat_interval_ms=0,
                )
        self._remove(group, member)
        return HeartbeatResult(
            member_id=member.member_id,
            member_epoch=request.member_epoch,
            heartbeat_interval_ms=0,
        )

    def _remove(self, group: ConsumerGroup, member: Member) -> None:
        group.remove(member)
        group.metadata = group.subscription_metadata(self.topics())
        group.group_epoch += 1  # the others' target assignment must be recomputed

    def expire(self, *, now_ms: int) -> list[Expired]:
        """Remove members whose session or rebalance timeout has passed."""
        expired = []
        for group in list(self._groups.values()):
            for member in list(group.members.values()):
                if member.session_deadline_ms <= now_ms:
                    reason = "its session expired"
                elif (
                    member.rebalance_deadline_ms is not None
                    and member.rebalance_deadline_ms <= now_ms
                ):
                    reason = "it did not revoke its partitions within the rebalance timeout"
                else:
                    continue
                self._remove(group, member)
                expired.append(
                    Expired(group_id=group.group_id, member_id=member.member_id, reason=reason)
                )
        return expired

    # -- offsets and admin ----------------------------------------------------------------

    def validate_offset_commit(self, group_id: str, *, member_id: str, member_epoch: int) -> None:
        """Whether a commit to a consumer-protocol group may be stored (Kafka's rules).

        A commit without a member (epoch < 0, admin tools) is accepted only while the group
        has no members; a member must commit with its current member epoch.
        """
        group = self._existing(group_id)
        if member_epoch < 0 and not group.members:
            return
        member = group.members.get(member_id)
        if member is None:
            raise ConsumerGroupError(
                E.unknown_member_id, f"member {member_id} is not in group {group_id}"
            )
        if member_epoch != member.assignment.member_epoch:
            raise ConsumerGroupError(
                E.stale_member_epoch,
                f"member epoch {member_epoch} is not the current {member.assignment.member_epoch}",
            )

    def delete(self, group_id: str) -> None:
        """Forget an empty group (DeleteGroups); raises if it has members."""
        group = self._existing(group_id)
        if group.members:
            raise ConsumerGroupError(E.non_empty_group, f"group {group_id} is not empty")
        del self._groups[group_id]
