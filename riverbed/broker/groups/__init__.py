"""Consumer groups: the group coordinator and the committed-offset store.

- :mod:`~riverbed.broker.groups.coordinator` — :class:`GroupCoordinator`, every group of the
  broker: loading, admin views, the validation of offset commits against a group, expiry;
- :mod:`~riverbed.broker.groups.classic_protocol` — the classic protocol's requests
  (JoinGroup/SyncGroup/Heartbeat/LeaveGroup), on
  :mod:`~riverbed.broker.groups.classic_rebalance`, its states, timers and member liveness;
- :mod:`~riverbed.broker.groups.consumer_protocol` — the consumer protocol's (KIP-848) groups,
  a pure state machine the coordinator owns beside the classic groups (its assignors,
  reconciliation, group record and messages in the ``consumer_protocol_*`` modules);
- :mod:`~riverbed.broker.groups.group` — one group's data and its clock-free rules;
- :mod:`~riverbed.broker.groups.offsets` — :class:`OffsetStore`, committed offsets durable in
  ``__consumer_offsets``;
- :mod:`~riverbed.broker.groups.records` — that topic's record format;
- :mod:`~riverbed.broker.groups.timers` — the timers the coordinator runs on (a fake one
  for tests);
- :mod:`~riverbed.broker.groups.subscription` — the topics of a consumer's subscription.

Nothing here raises for a client's mistake: the coordinator answers with Kafka error codes
(the consumer protocol's state machine raises ``ConsumerGroupError``s, each carrying its code).
Only storage failures raise (``riverbed.log.errors.LogError``, ``OSError``), mapped by the
handlers with ``riverbed.broker.errors.error_code_for``.
"""

from riverbed.broker.groups.coordinator import GroupCoordinator, GroupSettings
from riverbed.broker.groups.group import ClassicGroup, GroupState, JoinResult, SyncResult
from riverbed.broker.groups.offsets import OFFSETS_TOPIC, OffsetStore, OffsetValue
from riverbed.broker.groups.timers import LoopTimers, ManualTimers

__all__ = [
    "OFFSETS_TOPIC",
    "ClassicGroup",
    "GroupCoordinator",
    "GroupSettings",
    "GroupState",
    "JoinResult",
    "LoopTimers",
    "ManualTimers",
    "OffsetStore",
    "OffsetValue",
    "SyncResult",
]
