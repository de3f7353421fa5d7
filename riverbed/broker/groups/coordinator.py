"""The classic group coordinator: JoinGroup/SyncGroup/Heartbeat/LeaveGroup as a state machine.

One :class:`GroupCoordinator` per broker serves every group (a single broker coordinates all
of them). It follows Kafka's classic protocol (``GroupCoordinator``/``ClassicGroup``):

- A join without a member id gets a generated one. From JoinGroup v4 on it is answered
  MEMBER_ID_REQUIRED with that id and must rejoin with it within the session timeout.
- A join starts a rebalance (PreparingRebalance). The rebalance ends when every known member
  has rejoined, or when the group's rebalance timeout (the largest of its members') expires;
  members that did not rejoin are then removed. A rebalance of an *empty* group first waits
  ``group.initial.rebalance.delay.ms``, extended by the same delay each time a new member
  arrives meanwhile, never past the rebalance timeout (Kafka's InitialDelayedJoin), so a
  fleet of consumers starting together needs one rebalance, not one each.
- When a rebalance ends the generation is incremented, a protocol every member supports is
  chosen by the members' votes, a leader is kept or elected, and every member's JoinGroup is
  answered (the leader's with all members' metadata). The group waits in
  CompletingRebalance for the leader's SyncGroup with the assignments (opaque bytes), then
  answers every SyncGroup and is Stable. Members that do not send SyncGroup within the
  rebalance timeout are removed and a new rebalance starts.
- Heartbeats keep a member alive for its session timeout; during a rebalance they answer
  REBALANCE_IN_PROGRESS, which is how members learn to rejoin. A member waiting in
  JoinGroup or SyncGroup is alive by definition. An expired member is removed.
- Static members (``group_instance_id``): a member rejoining with a known instance id and no
  member id takes over the old member's place under a new member id; the old id is fenced
  (FENCED_INSTANCE_ID). If the group is Stable and its protocols are unchanged there is no
  rebalance: it gets the current generation and, via SyncGroup, its old assignment.

Offsets: :meth:`GroupCoordinator.commit_offsets` validates a commit against the group
(generation/member checks; generation -1 commits are allowed for empty or unknown groups,
Kafka's "simple" groups) and stores it in the :class:`~riverbed.broker.groups.offsets.OffsetStore`.
Offsets of groups that stay Empty expire after ``offsets.retention.minutes``, checked every
``offsets.retention.check.interval.ms``; an empty group left without offsets is removed.

Timing: every deadline is a timer of :mod:`riverbed.broker.groups.timers` (no polling); the
coordinator runs entirely on the broker's event loop. Members are not persisted: after a
broker restart, groups come back Empty (with their generation, protocol type and offsets)
and members rejoin, as their heartbeats answer UNKNOWN_MEMBER_ID.

Errors are returned as Kafka error codes (this is broker code); storage failures during a
commit raise, and the handler maps them with ``riverbed.broker.errors.error_code_for``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import Counter
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from riverbed.broker.groups.group import ClassicGroup, GroupState, JoinResult, Member, SyncResult
from riverbed.broker.groups.offsets import OffsetStore, OffsetValue, TopicPartition
from riverbed.broker.groups.timers import Timers
from riverbed.protocol import ErrorCode

__all__ = ["GroupCoordinator", "GroupDescription", "GroupListing", "GroupSettings"]

log = logging.getLogger(__name__)
E = ErrorCode


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupSettings:
    """The coordinator's settings; defaults are Kafka's (broker names in brackets)."""

    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    max_size: int = 2**31 - 1  # group.max.size
    offsets_retention_ms: int = 10080 * 60_000  # offsets.retention.minutes (7 days)
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str


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


def _resolve(waiter: asyncio.Future[Any] | None, result: Any) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(result)


class GroupCoordinator:
    """Every classic group of this broker, and their committed offsets (module doc)."""

    def __init__(self, *, settings: GroupSettings, store: OffsetStore, timers: Timers) -> None:
        self.settings = settings
        self.store = store
        self._timers = timers
        self._groups: dict[str, ClassicGroup] = {}
        self._initial_delay: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._writing: Counter[str] = Counter()
        """Groups with an offset commit waiting for its fsync."""
        self.loaded = False

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

    async def close(self) -> None:
        """Cancel every timer, answer waiting members, and wait for background writes."""
        self._timers.cancel_all()
        for group in self._groups.values():
            for member in group.members.values():
                _resolve(member.join_waiter, JoinResult(error_code=E.coordinator_not_available))
                _resolve(member.sync_waiter, SyncResult(error_code=E.coordinator_not_available))
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def group(self, group_id: str) -> ClassicGroup | None:
        """The live group object (read only, for admin views and tests)."""
        return self._groups.get(group_id)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _persist(self, group: ClassicGroup) -> None:
        try:
            await self.store.write_group(group.group_id, group.record())
        except Exception as e:  # a metadata record is an optimisation: never fatal
            log.error("cannot store group %s metadata: %s", group.group_id, e)

    # --- JoinGroup --------------------------------------------------------------------------

    async def join_group(
        self,
        *,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
    ) -> JoinResult:
        """Answer one JoinGroup; waits until the rebalance it takes part in completes."""
        if not self.loaded:
            return JoinResult(error_code=E.coordinator_load_in_progress, member_id=member_id)
        s = self.settings
        if not s.min_session_timeout_ms <= session_timeout_ms <= s.max_session_timeout_ms:
            return JoinResult(error_code=E.invalid_session_timeout, member_id=member_id)
        if not group_id:
            return JoinResult(error_code=E.invalid_group_id, member_id=member_id)
        group = self._groups.get(group_id)
        spec = Member(
            member_id=member_id,
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            protocol_type=protocol_type,
            protocols=protocols,
        )
        if not member_id:
            if group is None:
                group = ClassicGroup(group_id=group_id, state_timestamp_ms=self._timers.now_ms())
                self._groups[group_id] = group
            return await self._join_new(group, spec, require_known_member_id)
        if group is None or group.state is GroupState.DEAD:
            return JoinResult(error_code=E.unknown_member_id, member_id=member_id)
        return await self._join_known(group, spec)

    async def _join_new(
        self, group: ClassicGroup, spec: Member, require_known_member_id: bool
    ) -> JoinResult:
        if not group.accepts(protocol_type=spec.protocol_type, protocols=spec.protocols):
            return JoinResult(error_code=E.inconsistent_group_protocol)
        instance = spec.group_instance_id
        if instance is not None and instance in group.static_members:
            return await self._replace_static_member(group, spec)
        if len(group.members) + len(group.pending_members) >= self.settings.max_size:
            return JoinResult(error_code=E.group_max_size_reached)
        spec.member_id = f"{instance or spec.client_id}-{uuid.uuid4()}"
        if instance is None and require_known_member_id:
            # KIP-394: the client must come back with this id (it retries with it at once).
            group.pending_members.add(spec.member_id)
            self._timers.set(
                ("pending", group.group_id, spec.member_id),
                self._timers.now_ms() + spec.session_timeout_ms,
                lambda: self._expire_pending(group, spec.member_id),
            )
            return JoinResult(error_code=E.member_id_required, member_id=spec.member_id)
        return await self._add_member(group, spec)

    async def _join_known(self, group: ClassicGroup, spec: Member) -> JoinResult:
        member_id = spec.member_id
        if member_id in group.pending_members:
            if not group.accepts(protocol_type=spec.protocol_type, protocols=spec.protocols):
                return JoinResult(error_code=E.inconsistent_group_protocol, member_id=member_id)
            return await self._add_member(group, spec)
        fenced = self._fenced(group, member_id, spec.group_instance_id)
        if fenced is not None:
            return JoinResult(error_code=fenced, member_id=member_id)
        member = group.members[member_id]
        if not group.accepts(protocol_type=spec.protocol_type, protocols=spec.protocols):
            return JoinResult(error_code=E.inconsistent_group_protocol, member_id=member_id)
        unchanged = member.same_protocols(spec.protocols)
        if group.state is GroupState.COMPLETING_REBALANCE and unchanged:
            return self._current_generation(group, member)  # a retried join: same answer
        if group.state is GroupState.STABLE and unchanged and member_id != group.leader_id:
            return self._current_generation(group, member)
        # PreparingRebalance: wait with the others; otherwise (changed metadata, or the
        # leader rejoining, e.g. for a new topic matching its pattern) a new rebalance.
        return await self._update_and_rebalance(group, member, spec)

    def _fenced(
        self, group: ClassicGroup, member_id: str, instance: str | None
    ) -> ErrorCode | None:
        """FENCED_INSTANCE_ID / UNKNOWN_MEMBER_ID for a member id that is not current."""
        if instance is not None:
            current = group.static_members.get(instance)
            if current is not None and current != member_id:
                return E.fenced_instance_id
        if member_id not in group.members:
            return E.unknown_member_id
        return None

    async def _add_member(self, group: ClassicGroup, spec: Member) -> JoinResult:
        self._timers.cancel(("pending", group.group_id, spec.member_id))
        group.pending_members.discard(spec.member_id)
        spec.is_new = True
        waiter: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        spec.join_waiter = waiter
        group.add(spec)
        if group.group_id in self._initial_delay:
            group.new_member_added = True
        self._heartbeat(group, spec)
        self._rebalance_or_check(group)
        return await waiter

    async def _update_and_rebalance(
        self, group: ClassicGroup, member: Member, spec: Member
    ) -> JoinResult:
        _resolve(member.join_waiter, JoinResult(error_code=E.rebalance_in_progress))
        member.protocols = spec.protocols
        member.protocol_type = spec.protocol_type
        member.session_timeout_ms = spec.session_timeout_ms
        member.rebalance_timeout_ms = spec.rebalance_timeout_ms
        member.client_id, member.client_host = spec.client_id, spec.client_host
        waiter: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_waiter = waiter
        self._heartbeat(group, member)
        self._rebalance_or_check(group)
        return await waiter

    async def _replace_static_member(self, group: ClassicGroup, spec: Member) -> JoinResult:
        assert spec.group_instance_id is not None
        old_id = group.static_members[spec.group_instance_id]
        old = group.members.pop(old_id)
        self._timers.cancel(("session", group.group_id, old_id))
        _resolve(old.join_waiter, JoinResult(error_code=E.fenced_instance_id, member_id=old_id))
        _resolve(old.sync_waiter, SyncResult(error_code=E.fenced_instance_id))
        old.join_waiter = old.sync_waiter = None
        new_id = f"{spec.group_instance_id}-{uuid.uuid4()}"
        unchanged = old.same_protocols(spec.protocols)
        old.member_id = new_id
        old.client_id, old.client_host = spec.client_id, spec.client_host
        old.session_timeout_ms = spec.session_timeout_ms
        old.rebalance_timeout_ms = spec.rebalance_timeout_ms
        group.members[new_id] = old
        group.static_members[spec.group_instance_id] = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        if group.state is GroupState.STABLE and unchanged:
            self._heartbeat(group, old)
            self._spawn(self._persist(group))
            return self._current_generation(group, old, skip_assignment=True)
        old.protocols = spec.protocols
        old.protocol_type = spec.protocol_type
        waiter: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        old.join_waiter = waiter
        self._heartbeat(group, old)
        self._rebalance_or_check(group)
        return await waiter

    def _current_generation(
        self, group: ClassicGroup, member: Member, *, skip_assignment: bool = False
    ) -> JoinResult:
        is_leader = member.member_id == group.leader_id
        return JoinResult(
            error_code=E.none,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            skip_assignment=skip_assignment and is_leader,
            members=self._member_list(group) if is_leader else (),
        )

    def _member_list(self, group: ClassicGroup) -> tuple[tuple[str, str | None, bytes], ...]:
        protocol = group.protocol_name or ""
        return tuple(
            (m.member_id, m.group_instance_id, m.metadata_for(protocol))
            for m in group.members.values()
        )

    # --- rebalancing ------------------------------------------------------------------------

    def _rebalance_timeout_ms(self, group: ClassicGroup) -> int:
        return max((m.rebalance_timeout_ms for m in group.members.values()), default=0)

    def _rebalance_or_check(self, group: ClassicGroup) -> None:
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)
        else:
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: ClassicGroup) -> None:
        now = self._timers.now_ms()
        if group.state is GroupState.COMPLETING_REBALANCE:
            self._timers.cancel(("sync", group.group_id))
            for member in group.members.values():
                _resolve(member.sync_waiter, SyncResult(error_code=E.rebalance_in_progress))
        was_empty = group.state is GroupState.EMPTY
        group.transition(GroupState.PREPARING_REBALANCE, now_ms=now)
        timeout_ms = self._rebalance_timeout_ms(group)
        delay_ms = self.settings.initial_rebalance_delay_ms
        if was_empty and delay_ms > 0:
            delay_ms = min(delay_ms, timeout_ms)
            self._initial_delay.add(group.group_id)
            group.new_member_added = False
            self._set_initial_delay(group, delay_ms, remaining_ms=max(timeout_ms - delay_ms, 0))
            return
        self._timers.set(
            ("join", group.group_id), now + timeout_ms, lambda: self._join_timed_out(group)
        )
        self._try_complete_join(group)

    def _set_initial_delay(self, group: ClassicGroup, delay_ms: int, *, remaining_ms: int) -> None:
        def expired() -> None:
            if self._groups.get(group.group_id) is not group:
                return
            if group.new_member_added and remaining_ms > 0:
                group.new_member_added = False
                step = min(self.settings.initial_rebalance_delay_ms, remaining_ms)
                self._set_initial_delay(group, step, remaining_ms=remaining_ms - step)
                return
            self._initial_delay.discard(group.group_id)
            self._join_timed_out(group)

        self._timers.set(("join", group.group_id), self._timers.now_ms() + delay_ms, expired)

    def _try_complete_join(self, group: ClassicGroup) -> None:
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and group.group_id not in self._initial_delay
            and group.all_members_joined()
        ):
            self._complete_join(group)

    def _join_timed_out(self, group: ClassicGroup) -> None:
        if self._groups.get(group.group_id) is not group:
            return
        if group.state is GroupState.PREPARING_REBALANCE:
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        """End the rebalance: drop who did not rejoin, start the next generation, answer."""
        self._timers.cancel(("join", group.group_id))
        self._initial_delay.discard(group.group_id)
        now = self._timers.now_ms()
        for member in list(group.members.values()):
            if not member.awaiting_join:
                log.info(
                    "group %s: removing %s (did not rejoin in time)",
                    group.group_id,
                    member.member_id,
                )
                self._drop(group, member)
        for pending in group.pending_members:
            self._timers.cancel(("pending", group.group_id, pending))
        group.pending_members.clear()
        group.generation_id += 1
        if group.is_empty():
            group.protocol_name = None
            group.leader_id = None
            group.transition(GroupState.EMPTY, now_ms=now)
            self._spawn(self._persist(group))
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.transition(GroupState.COMPLETING_REBALANCE, now_ms=now)
        members = self._member_list(group)
        for member in group.members.values():
            is_leader = member.member_id == group.leader_id
            result = JoinResult(
                error_code=E.none,
                member_id=member.member_id,
                generation_id=group.generation_id,
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                leader=group.leader_id,
                members=members if is_leader else (),
            )
            member.is_new = False
            _resolve(member.join_waiter, result)
            self._heartbeat(group, member)
        generation = group.generation_id
        self._timers.set(
            ("sync", group.group_id),
            now + self._rebalance_timeout_ms(group),
            lambda: self._sync_timed_out(group, generation),
        )
        log.info(
            "group %s: generation %d with %d members, protocol %s",
            group.group_id,
            generation,
            len(group.members),
            group.protocol_name,
        )

    def _sync_timed_out(self, group: ClassicGroup, generation: int) -> None:
        if (
            self._groups.get(group.group_id) is not group
            or group.state is not GroupState.COMPLETING_REBALANCE
            or group.generation_id != generation
        ):
            return
        for member in list(group.members.values()):
            if not member.awaiting_sync:
                log.info(
                    "group %s: removing %s (no SyncGroup in time)", group.group_id, member.member_id
                )
                self._drop(group, member)
        self._prepare_rebalance(group)

    # --- liveness ---------------------------------------------------------------------------

    def _heartbeat(self, group: ClassicGroup, member: Member) -> None:
        now = self._timers.now_ms()
        member.last_heartbeat_ms = now
        member_id = member.member_id
        self._timers.set(
            ("session", group.group_id, member_id),
            now + member.session_timeout_ms,
            lambda: self._session_expired(group, member_id),
        )

    def _session_expired(self, group: ClassicGroup, member_id: str) -> None:
        member = group.members.get(member_id)
        if self._groups.get(group.group_id) is not group or member is None:
            return
        if member.awaiting_join or member.awaiting_sync:
            self._heartbeat(group, member)  # waiting on us: alive by definition
            return
        log.info("group %s: member %s session expired", group.group_id, member_id)
        self._remove_and_update(group, member)

    def _expire_pending(self, group: ClassicGroup, member_id: str) -> None:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._try_complete_join(group)

    def _drop(self, group: ClassicGroup, member: Member) -> None:
        self._timers.cancel(("session", group.group_id, member.member_id))
        _resolve(member.join_waiter, JoinResult(error_code=E.unknown_member_id))
        _resolve(member.sync_waiter, SyncResult(error_code=E.unknown_member_id))
        group.remove(member.member_id)

    def _remove_and_update(self, group: ClassicGroup, member: Member) -> None:
        self._drop(group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    # --- SyncGroup, Heartbeat, LeaveGroup ---------------------------------------------------

    def _validate(
        self, group: ClassicGroup | None, member_id: str, instance: str | None, generation: int
    ) -> ErrorCode | None:
        if group is None:
            return E.unknown_member_id
        if group.state is GroupState.DEAD:
            return E.coordinator_not_available
        fenced = self._fenced(group, member_id, instance)
        if fenced is not None:
            return fenced
        if generation != group.generation_id:
            return E.illegal_generation
        return None

    async def sync_group(
        self,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
    ) -> SyncResult:
        """Answer one SyncGroup; a follower waits for the leader's assignments."""
        if not self.loaded:
            return SyncResult(error_code=E.coordinator_load_in_progress)
        group = self._groups.get(group_id)
        error = self._validate(group, member_id, group_instance_id, generation_id)
        if error is not None:
            return SyncResult(error_code=error)
        assert group is not None
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return SyncResult(error_code=E.inconsistent_group_protocol)
        member = group.members[member_id]
        if group.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(error_code=E.rebalance_in_progress)
        if group.state is GroupState.STABLE:
            self._heartbeat(group, member)
            return self._sync_answer(group, member)
        if group.state is not GroupState.COMPLETING_REBALANCE:
            return SyncResult(error_code=E.unknown_member_id)
        _resolve(member.sync_waiter, SyncResult(error_code=E.rebalance_in_progress))
        waiter: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        member.sync_waiter = waiter
        self._heartbeat(group, member)
        if member_id == group.leader_id:
            for each in group.members.values():
                each.assignment = bytes(assignments.get(each.member_id, b""))
            self._timers.cancel(("sync", group_id))
            group.transition(GroupState.STABLE, now_ms=self._timers.now_ms())
            for each in group.members.values():
                _resolve(each.sync_waiter, self._sync_answer(group, each))
            self._spawn(self._persist(group))
        return await waiter

    def _sync_answer(self, group: ClassicGroup, member: Member) -> SyncResult:
        return SyncResult(
            error_code=E.none,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            assignment=member.assignment,
        )

    def heartbeat(
        self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        """Keep a member alive; REBALANCE_IN_PROGRESS tells it to rejoin."""
        if not self.loaded:
            return E.none  # Kafka answers blindly while loading; the member is not known yet
        group = self._groups.get(group_id)
        error = self._validate(group, member_id, group_instance_id, generation_id)
        if error is not None:
            return error
        assert group is not None
        self._heartbeat(group, group.members[member_id])
        if group.state is GroupState.PREPARING_REBALANCE:
            return E.rebalance_in_progress
        return E.none

    def leave_group(
        self, *, group_id: str, members: Iterable[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """Remove members (member_id, group_instance_id); a group-level and per-member codes.

        A static member may be named by its instance id alone (member_id "")."""
        wanted = list(members)
        if not self.loaded:
            return E.coordinator_load_in_progress, [E.coordinator_load_in_progress] * len(wanted)
        group = self._groups.get(group_id)
        if group is None:
            return E.none, [E.unknown_member_id] * len(wanted)
        if group.state is GroupState.DEAD:
            return E.coordinator_not_available, [E.coordinator_not_available] * len(wanted)
        results = []
        for member_id, instance in wanted:
            if not member_id and instance is not None:
                member_id = group.static_members.get(instance, "")
            if member_id in group.pending_members:
                group.pending_members.discard(member_id)
                self._timers.cancel(("pending", group_id, member_id))
                self._try_complete_join(group)
                results.append(E.none)
                continue
            error = self._fenced(group, member_id, instance)
            if error is not None:
                results.append(error)
                continue
            log.info("group %s: member %s left", group_id, member_id)
            self._remove_and_update(group, group.members[member_id])
            results.append(E.none)
        return E.none, results

    # --- admin ------------------------------------------------------------------------------

    def list_groups(self, *, states: Iterable[str] | None = None) -> list[GroupListing]:
        """Every live group; ``states`` filters by state name (case-insensitive)."""
        wanted = None if states is None else {s.lower() for s in states}
        return [
            GroupListing(
                group_id=g.group_id, protocol_type=g.protocol_type or "", state=g.state.value
            )
            for g in self._groups.values()
            if g.state is not GroupState.DEAD and (not wanted or g.state.value.lower() in wanted)
        ]

    def describe_group(self, group_id: str) -> GroupDescription:
        """Kafka's group summary: members with metadata and assignment when Stable."""
        group = self._groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return GroupDescription(
                group_id=group_id, state="Dead", protocol_type="", protocol_name="", members=()
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
        group = self._groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return E.group_id_not_found
        if group.state is not GroupState.EMPTY or group.pending_members:
            return E.non_empty_group
        self._forget(group)
        await self.store.delete_group(group_id)
        return E.none

    def _forget(self, group: ClassicGroup) -> None:
        group.transition(GroupState.DEAD, now_ms=self._timers.now_ms())
        self._timers.cancel(("join", group.group_id))
        self._timers.cancel(("sync", group.group_id))
        self._initial_delay.discard(group.group_id)
        del self._groups[group.group_id]

    # --- offsets ----------------------------------------------------------------------------

    async def commit_offsets(
        self,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Mapping[TopicPartition, OffsetValue],
    ) -> ErrorCode:
        """Validate a commit (Kafka's ``validateOffsetCommit``) and store it durably.

        Returns the error for every partition of the request; raises ``LogError``/``OSError``
        if the store could not write it."""
        if not self.loaded:
            return E.coordinator_load_in_progress
        if not group_id:
            return E.invalid_group_id
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return E.illegal_generation  # an old generation of a group that is gone
            group = ClassicGroup(group_id=group_id, state_timestamp_ms=self._timers.now_ms())
            self._groups[group_id] = group  # a "simple" group: offsets only
        elif group.state is GroupState.DEAD:
            return E.coordinator_not_available
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
        self._writing[group_id] += 1  # expiry must not drop the group meanwhile
        try:
            await self.store.commit(group_id, offsets)
        finally:
            self._writing[group_id] -= 1
            if not self._writing[group_id]:
                del self._writing[group_id]
        return E.none

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
        group = self._groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return E.group_id_not_found, {}
        wanted = list(partitions)
        results = dict.fromkeys(wanted, E.none)
        if group.state is not GroupState.EMPTY:
            subscribed = group.subscribed_topics()
            if subscribed is None:
                return E.non_empty_group, {}
            for tp in wanted:
                if tp[0] in subscribed:
                    results[tp] = E.group_subscribed_to_topic
        await self.store.delete_offsets(group_id, [tp for tp, e in results.items() if e is E.none])
        return E.none, results

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
        """Expire offsets of Empty groups older than the retention; remove groups left with
        nothing. Kafka (KIP-211): an empty group's offsets expire ``offsets.retention``
        after the later of their commit and the group becoming empty. Returns how many."""
        now = self._timers.now_ms()
        retention = self.settings.offsets_retention_ms
        expired_count = 0
        for group_id in self.store.group_ids() - self._groups.keys():
            # Offsets whose group object was dropped (cannot normally happen): adopt them.
            self._groups[group_id] = ClassicGroup(group_id=group_id)
        for group in list(self._groups.values()):
            if (
                group.state is not GroupState.EMPTY
                or group.pending_members
                or group.group_id in self._writing
            ):
                continue
            committed = self.store.fetch(group.group_id)
            expired = [
                tp
                for tp, value in committed.items()
                if now - max(value.commit_timestamp_ms, group.state_timestamp_ms) >= retention
            ]
            if expired:
                await self.store.delete_offsets(group.group_id, expired)
                expired_count += len(expired)
            if (
                self._groups.get(group.group_id) is group
                and group.state is GroupState.EMPTY
                and not group.pending_members
                and not self.store.has_offsets(group.group_id)
            ):
                self._forget(group)
                if self.store.group_record(group.group_id) is not None:
                    await self.store.delete_group(group.group_id)
        return expired_count
