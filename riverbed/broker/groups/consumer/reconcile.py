"""Reconciliation: moving one member's current assignment towards its target (KIP-848).

The coordinator never hands a partition to a member while another member may still be
consuming it. So a member converges on its target in steps, one per heartbeat:

1. If the member owns partitions it should no longer have, it keeps its epoch, keeps only the
   partitions it may keep, and is asked to revoke the others (``UNREVOKED_PARTITIONS``). It has
   revoked them once its heartbeat no longer lists them among its owned partitions.
2. Then it moves to the target epoch and gets its new partitions, except those another member
   still owns (not yet revoked there): it waits for them in ``UNRELEASED_PARTITIONS`` and gets
   them at a later heartbeat, after their previous owner let go.
3. With nothing left to revoke or to wait for, it is ``STABLE`` at the target epoch.

This is Kafka's ``CurrentAssignmentBuilder`` (group-coordinator module), with one owner per
partition looked up through ``partition_owner`` instead of per-partition epochs.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from riverbed.broker.groups.consumer.assignors import Assignment

__all__ = ["MemberAssignment", "MemberState", "assignment_equal", "owns_any", "reconcile"]


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberAssignment:
    """A member's side of reconciliation: its epochs and the partitions it holds."""

    state: MemberState = MemberState.STABLE
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    """Partitions the member was asked to give up and may still be consuming."""

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def with_epoch(self, epoch: int, **changes: object) -> MemberAssignment:
        """A copy at ``epoch``, remembering the current epoch as the previous one (Kafka's)."""
        return replace(
            self,
            member_epoch=epoch,
            previous_member_epoch=self.member_epoch,
            **changes,  # type: ignore[arg-type]
        )


def owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the member's reported ``owned`` partitions include any of ``partitions``.

    ``owned`` is ``None`` when the heartbeat did not report them; then nothing is known to be
    revoked yet, so the answer is yes.
    """
    if owned is None:
        return True
    return any(owned.get(topic_id, frozenset()) & parts for topic_id, parts in partitions.items())


def reconcile(
    member: MemberAssignment,
    *,
    member_id: str,
    target_epoch: int,
    target: Assignment,
    owned: Assignment | None,
    partition_owner: Callable[[uuid.UUID, int], str | None],
) -> MemberAssignment:
    """The member's next state towards ``target`` (see the module docstring).

    ``owned`` is what the member's heartbeat reported (``None``: not reported);
    ``partition_owner`` gives the member currently holding a partition, or ``None``.
    """
    if member.state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
    elif member.state is MemberState.UNREVOKED_PARTITIONS and owns_any(
        owned, member.pending_revocation
    ):
        return member  # still consuming partitions it must give up first
    keep: dict[uuid.UUID, frozenset[int]] = {}
    revoke: dict[uuid.UUID, frozenset[int]] = {}
    gain: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic_id in sorted(set(target) | set(member.assigned)):
        wanted = target.get(topic_id, frozenset())
        current = member.assigned.get(topic_id, frozenset())
        kept = current & wanted
        revoked = current - kept
        new = wanted - kept
        free = frozenset(p for p in new if partition_owner(topic_id, p) in (None, member_id))
        unreleased = unreleased or free != new
        for parts, into in ((kept, keep), (revoked, revoke), (free, gain)):
            if parts:
                into[topic_id] = parts
    if revoke and owns_any(owned, revoke):
        return member.with_epoch(
            member.member_epoch,
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned=keep,
            pending_revocation=revoke,
        )
    for topic_id, parts in gain.items():
        keep[topic_id] = keep.get(topic_id, frozenset()) | parts
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return member.with_epoch(target_epoch, state=state, assigned=keep, pending_revocation={})


def assignment_equal(a: Assignment, b: Mapping[uuid.UUID, frozenset[int]]) -> bool:
    """Equal partitions, ignoring topics mapped to an empty set."""
    return {k: v for k, v in a.items() if v} == {k: v for k, v in b.items() if v}
