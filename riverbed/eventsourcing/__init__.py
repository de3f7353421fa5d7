"""Event sourcing on the log: commands decided into events, state derived by replay.

A *command* is a request that may be refused; an *event* is a fact, decided once and never
changed. The events topic is the source of truth; states, snapshots and read models are
derived from it and can be rebuilt by replaying it (DESIGN.md, "Event sourcing").

- :mod:`~riverbed.eventsourcing.decider`: an aggregate as ``decide``/``evolve``/``initial``;
- :mod:`~riverbed.eventsourcing.messages`: commands, events and results on the wire;
- :mod:`~riverbed.eventsourcing.handling`: the contract's rules around a decider
  (``expected_version``, versions, event ids) and replay;
- :mod:`~riverbed.eventsourcing.upcasting`: old events read in the current schema;
- :mod:`~riverbed.eventsourcing.aggregate_type`: one kind of aggregate in one value (its
  decider, wire types, topics, personal fields, state document and snapshots);
- :mod:`~riverbed.eventsourcing.partition`: what a command processor holds for one
  partition of the commands topic (aggregates, decided command ids) and how it answers;
- :mod:`~riverbed.eventsourcing.processor`: the command processor on Kafka (a consumer
  group; each batch's events, results and offsets in one transaction);
- :mod:`~riverbed.eventsourcing.reader`: an aggregate's history, its state now, after a
  version or as of a time (time travel), and forgetting a subject;
- :mod:`~riverbed.eventsourcing.sender`: sending commands and waiting for their results;
- :mod:`~riverbed.eventsourcing.projections`: read models: the fold of events into states
  with its position, and the store interface (sans-IO);
  :mod:`~riverbed.eventsourcing.projection_runner` runs one over the events topic,
  :mod:`~riverbed.eventsourcing.projection_changelog` stores it as a compacted topic and
  :mod:`~riverbed.eventsourcing.projection_postgres` as a PostgreSQL table, each batch with
  its position in one transaction;
- :mod:`~riverbed.eventsourcing.shredding`: personal fields sealed per subject (AES-GCM),
  forgotten by deleting the subject's key;
- :mod:`~riverbed.eventsourcing.shop`: the shop's carts;
- :mod:`~riverbed.eventsourcing.errors`: one hierarchy, rooted at
  :class:`EventSourcingError`.

The processor, the reader, the sender, the projection runner and stores and
``topics.ensure_topics`` are Kafka clients (confluent-kafka; the PostgreSQL store also uses
psycopg2); the rest is sans-IO.
"""

from riverbed.eventsourcing.aggregate_type import AggregateType, Snapshot
from riverbed.eventsourcing.decider import Decider, Rejection
from riverbed.eventsourcing.errors import (
    EventSourcingError,
    MessageError,
    ReplayError,
    UpcastError,
)
from riverbed.eventsourcing.handling import Aggregate, Decision, DomainTypes, decide, replay
from riverbed.eventsourcing.messages import Command, Event, Result, StreamFormat
from riverbed.eventsourcing.upcasting import Upcaster, Upcasters

__all__ = [
    "Aggregate",
    "AggregateType",
    "Command",
    "Decider",
    "Decision",
    "DomainTypes",
    "Event",
    "EventSourcingError",
    "MessageError",
    "Rejection",
    "ReplayError",
    "Result",
    "Snapshot",
    "StreamFormat",
    "UpcastError",
    "Upcaster",
    "Upcasters",
    "decide",
    "replay",
]
