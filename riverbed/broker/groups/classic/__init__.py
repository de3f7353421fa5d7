"""The classic consumer group protocol: JoinGroup, SyncGroup, Heartbeat and LeaveGroup.

A group's leader computes the assignment; the coordinator runs the rebalances that get every
member to the same generation and hands the leader's assignment out.

- :mod:`~riverbed.broker.groups.classic.membership` — :class:`ClassicMembership`, the four
  requests: joining (with member ids handed out and static members), syncing, heartbeats,
  leaving;
- :mod:`~riverbed.broker.groups.classic.rebalance` — :class:`ClassicRebalance`, the engine
  under them: state transitions, timers, member liveness, and :class:`GroupSettings`;
- :mod:`~riverbed.broker.groups.classic.group` — :class:`ClassicGroup`, one group's data and
  its clock-free rules (protocol selection, valid joins), with the state diagram;
- :mod:`~riverbed.broker.groups.classic.subscription` — the topics a member of protocol type
  ``consumer`` subscribes to (OffsetDelete needs them).

Errors are answered as Kafka error codes (``JoinResult``, ``SyncResult``, ``ErrorCode``),
never raised.
"""

from riverbed.broker.groups.classic.group import ClassicGroup, GroupState, JoinResult, SyncResult
from riverbed.broker.groups.classic.membership import ClassicMembership
from riverbed.broker.groups.classic.rebalance import GroupSettings

__all__ = [
    "ClassicGroup",
    "ClassicMembership",
    "GroupSettings",
    "GroupState",
    "JoinResult",
    "SyncResult",
]
