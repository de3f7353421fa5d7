"""The consumer group protocol of KIP-848 (``group.protocol=consumer``), as a pure state machine.

Members join, stay and leave with ConsumerGroupHeartbeat alone, and the coordinator computes
the assignment. No I/O and no clock: :class:`ConsumerGroups` takes ``now_ms`` from its
caller, the :class:`~riverbed.broker.groups.GroupCoordinator`, which runs its deadlines.

- :mod:`~riverbed.broker.groups.consumer.state_machine` — :class:`ConsumerGroups`, every such
  group of the broker: heartbeats, epochs, leaving, expiry, offset-commit checks;
- :mod:`~riverbed.broker.groups.consumer.group` — one group's record and the state Kafka
  reports for it (:class:`ConsumerGroupState`);
- :mod:`~riverbed.broker.groups.consumer.assignors` — the server-side assignors (``uniform``,
  ``range``) that compute each member's target assignment;
- :mod:`~riverbed.broker.groups.consumer.reconcile` — one member's steps towards its target,
  so that no partition is ever owned twice;
- :mod:`~riverbed.broker.groups.consumer.messages` — the request, its answer and the
  refusals.

Refusals raise :class:`ConsumerGroupError`, which carries the Kafka error code the client
gets; nothing else is raised for a client's mistake.
"""

from riverbed.broker.groups.consumer.assignors import Assignment
from riverbed.broker.groups.consumer.group import ConsumerGroup, ConsumerGroupState
from riverbed.broker.groups.consumer.messages import (
    ConsumerGroupError,
    Heartbeat,
    HeartbeatResult,
    TopicInfo,
)
from riverbed.broker.groups.consumer.state_machine import ConsumerGroups

__all__ = [
    "Assignment",
    "ConsumerGroup",
    "ConsumerGroupError",
    "ConsumerGroupState",
    "ConsumerGroups",
    "Heartbeat",
    "HeartbeatResult",
    "TopicInfo",
]
