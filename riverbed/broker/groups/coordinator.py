"""The group coordinator: every group of this broker, their committed offsets and admin views.

One :class:`GroupCoordinator` per broker serves every group of both protocols (a single
broker coordinates all of them). The classic protocol's requests come from its base class,
:class:`~riverbed.broker.groups.classic.ClassicMembership`; the consumer protocol's (KIP-848)
groups are a :class:`~riverbed.broker.groups.consumer.ConsumerGroups` state machine it owns
and whose deadlines it runs on its timers. This module adds what is not about one
protocol's membership:

- one group id, one type (Kafka 4's rule): an empty group of one protocol becomes a group of
  the other when a member of that one arrives, keeping its offsets; a live one refuses;

- loading: after the offset store has replayed ``__consumer_offsets``, every group it knows
  comes back Empty (:meth:`GroupCoordinator.finish_loading`); until then requests answer
  COORDINATOR_LOAD_IN_PROGRESS;
- offsets: :meth:`GroupCoordinator.commit_offsets` validates a commit against the group
  (generation/member checks; generation -1 commits are allowed for empty or unknown groups,
  Kafka's "simple" groups) and stores it in the
  :class:`~riverbed.broker.groups.offset_store.OffsetStore`. Offsets of groups that stay Empty
  expire after ``offsets.retention.minutes``, checked every
  ``offsets.retention.check.interval.ms``; an empty group left without offsets is removed;
- admin: ListGroups, DescribeGroups, DeleteGroups.

Errors are returned as Kafka error codes (this is broker code); storage failures during a
commit raise, and the handler maps them with ``riverbed.broker.errors.error_code_for``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from riverbed.broker.groups.classic import (
    ClassicGroup,
    ClassicMembership,
    GroupSettings,
    GroupState,
)
from riverbed.broker.groups.consumer import (
    ConsumerGroupError,
    ConsumerGroups,
    Heartbeat,
    HeartbeatResult,
)
from riverbed.broker.groups.offset_store import OffsetStore, TopicPartition
from riverbed.broker.groups.offsets_topic_records import OffsetValue
from riverbed.broker.groups.timers import Timers
from riverbed.protocol import ErrorCode

__all__ = ["GroupCoordinator", "GroupDescription", "GroupListing", "MemberDescription"]

log = logging.getLogger(__name__)
E = ErrorCode

CLASSIC, CONSUMER = "classic", "consumer"
"""Group types, as ListGroups v5 names them (Kafka's ``Group.GroupType``)."""
CONSUMER_PROTOCOL_TYPE = "consumer"
"""The protocol type ListGroups reports for a consumer-protocol group (Kafka's
``ConsumerProtocol.PROTOCOL_TYPE``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str
    """"classic" or "consumer" (KIP-848), as ListGroups v5 reports it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol_name: str
    members: tuple[MemberDescription, ...]
    error_code: ErrorCode = ErrorCode.none
    """GROUP_ID_NOT_FOUND for no classic group of that id (DescribeGroups v6+ says so)."""
    error_message: str | None = None


class GroupCoordinator(ClassicMembership):
    """Every group of this broker, and their committed offsets (module doc)."""

    def __init__(
        self,
        *,
        settings: GroupSettings,
        store: OffsetStore,
        timers: Timers,
        consumer: ConsumerGroups | None = None,
    ) -> None:
        super().__init__(settings=settings, store=store, timers=timers)
        self.consumer = consumer if consumer is not None else ConsumerGroups(topics=dict)
        """The consumer-protocol (KIP-848) groups; their deadlines run on ``timers`` too."""
        self._writing: Counter[str] = Counter()
        """Groups with an offset commit waiting for its fsync."""

    # --- lifecycle --------------------------------------------------------------------------

    def finish_loading(self) -> None:
        """Called once the store is loaded: every group it knows comes back Empty.

        Also starts the periodic offset-expiry check (so call it on the event loop)."""
        now = self._timers.now_ms()
        for group_id in self.store.group_ids():
            record = self.store.group_record(group_id) or {}
            self._groups[group_id] = ClassicGroup(
                group_id=group_id,
                state_timestamp_ms=int(record.get("state_timestamp", 0) or 0),
                generation_id=int(record.get("generation", 0) or 0),
                protocol_type=record.get("protocol_type") or None,
            )
        self.loaded = True
        self._schedule_expiry(now + self.settings.offsets_retention_check_interval_ms)

    # --- admin ------------------------------------------------------------------------------

    def list_groups(
        self, *, states: Iterable[str] | None = None, types: Iterable[str] | None = None
    ) -> list[GroupListing]:
        """Every live group of both protocols; ``states`` filters by state name and ``types``
        by group type ("classic", "consumer"), both case-insensitive (ListGroups v4/v5)."""
        listings = [
            GroupListing(
                group_id=g.group_id,
                protocol_type=g.protocol_type or "",
                state=g.state.value,
                group_type=CLASSIC,
            )
            for g in self._groups.values()
            if g.state is not GroupState.DEAD
        ]
        listings += [
            GroupListing(
                group_id=g.group_id,
                protocol_type=CONSUMER_PROTOCOL_TYPE,
                state=g.state.value,
                group_type=CONSUMER,
            )
            for g in self.consumer
        ]
        wanted_states = {s.lower() for s in states or ()}
        wanted_types = {t.lower() for t in types or ()}
        return [
            g
            for g in listings
            if (not wanted_states or g.state.lower() in wanted_states)
            and (not wanted_types or g.group_type in wanted_types)
        ]

    def describe_group(self, group_id: str) -> GroupDescription:
        """Kafka's group summary: members with metadata and assignment when Stable."""
        group = self._groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            # Kafka 4 (GroupMetadataManager.describeGroups): a consumer-protocol group is
            # "not a classic group", reported like a missing one.
            what = "is not a classic group" if group_id in self.consumer else "not found"
            return GroupDescription(
                group_id=group_id,
                state=GroupState.DEAD.value,
                protocol_type="",
                protocol_name="",
                members=(),
                error_code=E.group_id_not_found,
                error_message=f"Group {group_id} {what}.",
            )
        stable = group.state is GroupState.STABLE
        protocol = group.protocol_name or ""
        return GroupDescription(
            group_id=group_id,
            state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_name=protocol if stable else "",
            members=tuple(
                MemberDescription(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    metadata=m.metadata_for(protocol) if stable else b"",
                    assignment=m.assignment if stable else b"",
                )
                for m in group.members.values()
            ),
        )

    async def delete_group(self, group_id: str) -> ErrorCode:
        """Delete an empty group and its offsets (tombstones); NON_EMPTY_GROUP otherwise."""
        if not self.loaded:
            return E.coordinator_load_in_progress
        if group_id in self.consumer:
            try:
                self.consumer.delete(group_id)
            except ConsumerGroupError as e:
                return e.error_code
            await self.store.delete_group(group_id)
            return E.none
        group = self._groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return E.group_id_not_found
        if group.state is not GroupState.EMPTY or group.pending_members:
            return E.non_empty_group
        self._forget(group)
        await self.store.delete_group(group_id)
        return E.none

    # --- offsets ----------------------------------------------------------------------------

    async def commit_offsets(
        self,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Mapping[TopicPartition, OffsetValue],
        producer: tuple[int, int] | None = None,
    ) -> ErrorCode:
        """Validate a commit (Kafka's ``validateOffsetCommit``) and store it durably.

        With ``producer`` (id, epoch) it is a TxnOffsetCommit: stored as part of that
        producer's transaction, and validated as Kafka does for those (a member id or
        generation, when given, must match; a rebalance in progress does not matter).

        Returns the error for every partition of the request; raises ``LogError``/``OSError``
        if the store could not write it."""
        error = self._refuse_commit(
            group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
            transactional=producer is not None,
        )
        if error is not None:
            return error
        self._writing[group_id] += 1  # expiry must not drop the group meanwhile
        try:
            await self.store.commit(group_id, offsets, producer=producer)
        finally:
            self._writing[group_id] -= 1
            if not self._writing[group_id]:
                del self._writing[group_id]
        return E.none

    def _refuse_commit(
        self,
        group_id: str,
        *,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        transactional: bool,
    ) -> ErrorCode | None:
        """Why a commit may not be stored, or None (then a classic group's member has
        heartbeated, and an unknown group has become a "simple" one)."""
        if not self.loaded:
            return E.coordinator_load_in_progress
        if not group_id:
            return E.invalid_group_id
        if group_id in self.consumer:
            # KIP-848: the member epoch arrives in the generation field (any version).
            if not transactional or member_id:
                try:
                    self.consumer.validate_offset_commit(
                        group_id, member_id=member_id, member_epoch=generation_id
                    )
                except ConsumerGroupError as e:
                    return e.error_code
            return None
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0 and not transactional:
                return E.illegal_generation  # an old generation of a group that is gone
            group = ClassicGroup(group_id=group_id, state_timestamp_ms=self._timers.now_ms())
            self._groups[group_id] = group  # a "simple" group: offsets only
        elif group.state is GroupState.DEAD:
            return E.coordinator_not_available
        elif transactional:
            if member_id and member_id not in group.members:
                return E.unknown_member_id
            if generation_id >= 0 and generation_id != group.generation_id:
                return E.illegal_generation
        elif generation_id < 0 and group.state is GroupState.EMPTY:
            pass
        elif generation_id >= 0 or member_id or group_instance_id is not None:
            error = self._validate(group, member_id, group_instance_id, generation_id)
            if error is not None:
                return error
            if group.state is GroupState.COMPLETING_REBALANCE:
                return E.rebalance_in_progress
            self._heartbeat(group, group.members[member_id])
        else:
            return E.unknown_member_id
        return None

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None
    ) -> tuple[ErrorCode, dict[TopicPartition, OffsetValue]]:
        """The committed offsets (only those that exist; all of the group's if None)."""
        if not self.loaded:
            return E.coordinator_load_in_progress, {}
        return E.none, self.store.fetch(group_id, partitions)

    async def delete_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: refused per partition while the group consumes its topic."""
        if not self.loaded:
            return E.coordinator_load_in_progress, {}
        wanted = list(partitions)
        results = dict.fromkeys(wanted, E.none)
        consumer_group = self.consumer.get(group_id)
        group = self._groups.get(group_id)
        if consumer_group is not None:
            # Kafka's ConsumerGroup.isSubscribedToTopic: the topics its members subscribe to.
            for tp in wanted:
                if tp[0] in consumer_group.metadata:
                    results[tp] = E.group_subscribed_to_topic
        elif group is None or group.state is GroupState.DEAD:
            return E.group_id_not_found, {}
        elif group.state is not GroupState.EMPTY:
            subscribed = group.subscribed_topics()
            if subscribed is None:
                return E.non_empty_group, {}
            for tp in wanted:
                if tp[0] in subscribed:
                    results[tp] = E.group_subscribed_to_topic
        await self.store.delete_offsets(group_id, [tp for tp, e in results.items() if e is E.none])
        return E.none, results

    # --- the consumer protocol (KIP-848) ---------------------------------------------------

    def consumer_heartbeat(self, request: Heartbeat) -> HeartbeatResult:
        """Serve one ConsumerGroupHeartbeat; raises a ``ConsumerGroupError``.

        Afterwards the timer of the groups' next session or rebalance deadline is (re)armed.
        """
        classic = self._groups.get(request.group_id)
        if classic is not None and request.member_epoch == 0:
            # One group id, one type (Kafka 4's getOrMaybeCreateConsumerGroup): an empty
            # classic group becomes a consumer group, keeping its offsets; a live one is not
            # a consumer group. (No online migration of classic members.)
            if classic.state is not GroupState.EMPTY or classic.pending_members:
                raise ConsumerGroupError(
                    E.group_id_not_found, f"Group {request.group_id} is not a consumer group."
                )
            log.info("group %s: the empty classic group becomes a consumer group", classic.group_id)
            self._forget(classic)
        try:
            return self.consumer.heartbeat(request, now_ms=self._timers.now_ms())
        finally:
            self._arm_consumer_expiry()

    def _claim_for_classic(self, group_id: str) -> ErrorCode | None:
        """One group id, one type (Kafka 4's classicGroupJoin): a JoinGroup converts an empty
        consumer group to a classic one (offsets kept); a live one answers
        INCONSISTENT_GROUP_PROTOCOL (no online migration of consumer members)."""
        group = self.consumer.get(group_id)
        if group is None:
            return None
        if group.members:
            return E.inconsistent_group_protocol
        log.info("group %s: the empty consumer group becomes a classic group", group_id)
        self.consumer.delete(group_id)
        return None

    def _arm_consumer_expiry(self) -> None:
        deadline = self.consumer.next_deadline_ms()
        if deadline is None:
            self._timers.cancel(("consumer-expire",))
            return

        def due() -> None:
            for expired in self.consumer.expire(now_ms=self._timers.now_ms()):
                log.info(
                    "group %s: member %s removed: %s",
                    expired.group_id,
                    expired.member_id,
                    expired.reason,
                )
            self._arm_consumer_expiry()

        self._timers.set(("consumer-expire",), deadline, due)

    # --- expiry -----------------------------------------------------------------------------

    def _schedule_expiry(self, deadline_ms: int) -> None:
        def due() -> None:
            self._spawn(self._expire_and_reschedule())

        self._timers.set(("expire-offsets",), deadline_ms, due)

    async def _expire_and_reschedule(self) -> None:
        try:
            await self.expire_offsets()
        except Exception as e:
            log.error("offset expiry failed: %s", e)
        self._schedule_expiry(
            self._timers.now_ms() + self.settings.offsets_retention_check_interval_ms
        )

    async def expire_offsets(self) -> int:
        """Expire offsets of empty groups older than the retention; remove groups left with
        nothing. Returns how many offsets expired. Kafka's rules: a classic group's offsets
        expire ``offsets.retention`` after the later of their commit and the group becoming
        Empty (KIP-211); a consumer-protocol group's after their commit."""
        expired_count = 0
        for group_id in self.store.group_ids() - self._groups.keys():
            if group_id not in self.consumer:
                # Offsets whose group object was dropped (cannot normally happen): adopt them.
                self._groups[group_id] = ClassicGroup(group_id=group_id)
        for group in list(self._groups.values()):
            if group.state is not GroupState.EMPTY or group.pending_members:
                continue
            expired_count += await self._expire(
                group.group_id, empty_since_ms=group.state_timestamp_ms
            )
            if (
                self._groups.get(group.group_id) is group
                and group.state is GroupState.EMPTY
                and not group.pending_members
                and not self.store.has_offsets(group.group_id)
            ):
                self._forget(group)
                if self.store.group_record(group.group_id) is not None:
                    await self.store.delete_group(group.group_id)
        for consumer_group in self.consumer:
            if consumer_group.members:
                continue
            group_id = consumer_group.group_id
            expired_count += await self._expire(group_id, empty_since_ms=0)
            current = self.consumer.get(group_id)
            if (
                current is consumer_group
                and not current.members
                and not self.store.has_offsets(group_id)
            ):
                self.consumer.delete(group_id)
        return expired_count

    async def _expire(self, group_id: str, *, empty_since_ms: int) -> int:
        """Delete the group's offsets past the retention; how many (none while committing)."""
        if group_id in self._writing:
            return 0
        now = self._timers.now_ms()
        expired = [
            tp
            for tp, value in self.store.fetch(group_id).items()
            if now - max(value.commit_timestamp_ms, empty_since_ms)
            >= self.settings.offsets_retention_ms
        ]
        if expired:
            await self.store.delete_offsets(group_id, expired)
        return len(expired)
