"""Consumer groups: the group coordinator, its two protocols and the committed-offset store.

- :mod:`~riverbed.broker.groups.coordinator` — :class:`GroupCoordinator`, every group of the
  broker: loading, one type per group id, the validation of offset commits against a group,
  admin views (ListGroups, DescribeGroups, DeleteGroups), offset expiry;
- :mod:`~riverbed.broker.groups.classic` — the classic protocol (JoinGroup, SyncGroup,
  Heartbeat, LeaveGroup): the coordinator's base class, its rebalance engine and a classic
  group's state;
- :mod:`~riverbed.broker.groups.consumer` — the consumer protocol of KIP-848
  (ConsumerGroupHeartbeat), a pure state machine the coordinator owns, with its assignors
  and reconciliation;
- :mod:`~riverbed.broker.groups.offset_store` — :class:`OffsetStore`, committed offsets (and a
  record per group) durable in ``__consumer_offsets``;
- :mod:`~riverbed.broker.groups.offsets_topic_records` — the format of that topic's records;
- :mod:`~riverbed.broker.groups.timers` — the timers the coordinators run on (the loop's, and
  a fake one for tests); the transaction coordinator uses them too.

Nothing here raises for a client's mistake: the coordinator answers with Kafka error codes
(the consumer protocol's state machine raises a ``ConsumerGroupError`` carrying its code,
which the coordinator and its handler turn into the answer). Only storage failures raise
(``riverbed.log.errors.LogError``, ``OSError``), mapped by the handlers with
``riverbed.broker.errors.error_code_for``.
"""

from riverbed.broker.groups.classic import GroupSettings
from riverbed.broker.groups.coordinator import GroupCoordinator
from riverbed.broker.groups.offset_store import OffsetStore
from riverbed.broker.groups.offsets_topic_records import OffsetValue
from riverbed.broker.groups.timers import LoopTimers, ManualTimers

__all__ = [
    "GroupCoordinator",
    "GroupSettings",
    "LoopTimers",
    "ManualTimers",
    "OffsetStore",
    "OffsetValue",
]
