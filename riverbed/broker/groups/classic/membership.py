"""Membership of a classic group: JoinGroup, SyncGroup, Heartbeat and LeaveGroup.

Each method of :class:`ClassicMembership` answers one request on the
:class:`~riverbed.broker.groups.classic.rebalance.ClassicRebalance` engine (Kafka's
``GroupCoordinator``/``ClassicGroup``):

- A join without a member id gets a generated one. From JoinGroup v4 on it is answered
  MEMBER_ID_REQUIRED with that id and must rejoin with it within the session timeout.
- A join starts or joins a rebalance and waits until it completes; the leader's SyncGroup
  carries the assignments (opaque bytes), which every member's SyncGroup then gets.
- Heartbeats answer REBALANCE_IN_PROGRESS during a rebalance, which is how members learn
  to rejoin.
- Static members (``group_instance_id``): a member rejoining with a known instance id and no
  member id takes over the old member's place under a new member id; the old id is fenced
  (FENCED_INSTANCE_ID). If the group is Stable and its protocols are unchanged there is no
  rebalance: it gets the current generation and, via SyncGroup, its old assignment.

Errors are returned as Kafka error codes, never raised.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable, Mapping

from riverbed.broker.groups.classic.group import (
    ClassicGroup,
    GroupState,
    JoinResult,
    Member,
    SyncResult,
)
from riverbed.broker.groups.classic.rebalance import ClassicRebalance, resolve
from riverbed.protocol import ErrorCode

__all__ = ["ClassicMembership"]

log = logging.getLogger(__name__)
E = ErrorCode


class ClassicMembership(ClassicRebalance):
    """The four requests of the classic protocol (module doc)."""

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
        claimed = self._claim_for_classic(group_id)
        if claimed is not None:
            return JoinResult(error_code=claimed, member_id=member_id)
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
        resolve(member.join_waiter, JoinResult(error_code=E.rebalance_in_progress))
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
        resolve(old.join_waiter, JoinResult(error_code=E.fenced_instance_id, member_id=old_id))
        resolve(old.sync_waiter, SyncResult(error_code=E.fenced_instance_id))
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

    # --- SyncGroup, Heartbeat, LeaveGroup ---------------------------------------------------

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
        resolve(member.sync_waiter, SyncResult(error_code=E.rebalance_in_progress))
        waiter: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        member.sync_waiter = waiter
        self._heartbeat(group, member)
        if member_id == group.leader_id:
            for each in group.members.values():
                each.assignment = bytes(assignments.get(each.member_id, b""))
            self._timers.cancel(("sync", group_id))
            group.transition(GroupState.STABLE, now_ms=self._timers.now_ms())
            for each in group.members.values():
                resolve(each.sync_waiter, self._sync_answer(group, each))
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
