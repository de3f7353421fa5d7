"""The classic protocol's rebalance engine: group states, timers and member liveness.

:class:`ClassicRebalance` holds every classic group of the broker and moves them between
states (:mod:`riverbed.broker.groups.classic.group` draws the diagram); the requests that
drive it are those of :class:`~riverbed.broker.groups.classic.membership.ClassicMembership`.
Kafka's classic protocol (``GroupCoordinator``/``ClassicGroup``):

- A join starts a rebalance (PreparingRebalance). The rebalance ends when every known member
  has rejoined, or when the group's rebalance timeout (the largest of its members') expires;
  members that did not rejoin are then removed. A rebalance of an *empty* group first waits
  ``group.initial.rebalance.delay.ms``, extended by the same delay each time a new member
  arrives meanwhile, never past the rebalance timeout (Kafka's InitialDelayedJoin), so a
  fleet of consumers starting together needs one rebalance, not one each.
- When a rebalance ends the generation is incremented, a protocol every member supports is
  chosen by the members' votes, a leader is kept or elected, and every member's JoinGroup is
  answered (the leader's with all members' metadata). The group waits in
  CompletingRebalance for the leader's SyncGroup; members that do not send it within the
  rebalance timeout are removed and a new rebalance starts.
- Heartbeats keep a member alive for its session timeout. A member waiting in JoinGroup or
  SyncGroup is alive by definition. An expired member is removed.

Timing: every deadline is a timer of :mod:`riverbed.broker.groups.timers` (no polling); all
of it runs on the broker's event loop. Members are not persisted: after a broker restart,
groups come back Empty (with their generation, protocol type and offsets) and members
rejoin, as their heartbeats answer UNKNOWN_MEMBER_ID.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from riverbed.broker.groups.classic.group import (
    ClassicGroup,
    GroupState,
    JoinResult,
    Member,
    SyncResult,
)
from riverbed.broker.groups.offset_store import OffsetStore
from riverbed.broker.groups.timers import Timers
from riverbed.protocol import ErrorCode

__all__ = ["ClassicRebalance", "GroupSettings", "resolve"]

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


def resolve(waiter: asyncio.Future[Any] | None, result: Any) -> None:
    """Answer a member waiting in JoinGroup or SyncGroup (once; later answers are dropped)."""
    if waiter is not None and not waiter.done():
        waiter.set_result(result)


class ClassicRebalance:
    """Every classic group of this broker, and the transitions between their states."""

    def __init__(self, *, settings: GroupSettings, store: OffsetStore, timers: Timers) -> None:
        self.settings = settings
        self.store = store
        self._timers = timers
        self._groups: dict[str, ClassicGroup] = {}
        self._initial_delay: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.loaded = False
        """Set once the offset store is loaded; until then requests answer LOAD_IN_PROGRESS."""

    async def close(self) -> None:
        """Cancel every timer, answer waiting members, and wait for background writes."""
        self._timers.cancel_all()
        for group in self._groups.values():
            for member in group.members.values():
                resolve(member.join_waiter, JoinResult(error_code=E.coordinator_not_available))
                resolve(member.sync_waiter, SyncResult(error_code=E.coordinator_not_available))
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

    def _claim_for_classic(self, group_id: str) -> ErrorCode | None:
        """Called for every JoinGroup: an error if ``group_id`` belongs to a group of another
        type (the coordinator, which knows them, decides); None to go on."""
        return None

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

    def _current_generation(
        self, group: ClassicGroup, member: Member, *, skip_assignment: bool = False
    ) -> JoinResult:
        """``member``'s JoinGroup answer in the current generation (the leader's carries
        every member's metadata)."""
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
                resolve(member.sync_waiter, SyncResult(error_code=E.rebalance_in_progress))
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
        for member in group.members.values():
            member.is_new = False
            resolve(member.join_waiter, self._current_generation(group, member))
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
        resolve(member.join_waiter, JoinResult(error_code=E.unknown_member_id))
        resolve(member.sync_waiter, SyncResult(error_code=E.unknown_member_id))
        group.remove(member.member_id)

    def _remove_and_update(self, group: ClassicGroup, member: Member) -> None:
        self._drop(group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

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

    def _forget(self, group: ClassicGroup) -> None:
        group.transition(GroupState.DEAD, now_ms=self._timers.now_ms())
        self._timers.cancel(("join", group.group_id))
        self._timers.cancel(("sync", group.group_id))
        self._initial_delay.discard(group.group_id)
        del self._groups[group.group_id]
