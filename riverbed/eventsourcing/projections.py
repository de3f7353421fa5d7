"""Projections (read models): an aggregate type's states, folded from the events topic into
a store that keeps them together with the position they were folded to.

A projection reads every partition of the events topic (read_committed) from its position,
folds each event into its aggregate's state (:func:`~riverbed.eventsourcing.handling.replay`,
upcasting included) and hands the aggregates a batch changed, with the position after the
batch (the next offset of every events partition), to its *store*, which applies both in
one transaction. A model and its position therefore always agree: a projection killed at
any instant and restarted goes on from the position its model holds, and no event's effect
is lost or applied twice (exactly once). Since the events topic is kept forever, a model
can be made anew at any time from offset 0 (``rebuild``), and the result is the model the
live projection has: both are the same fold of the same events.

- here, sans-IO: :class:`ProjectionFold` (the fold and the position, no I/O),
  :class:`ProjectionStore` (what a store does), the errors;
- :mod:`~riverbed.eventsourcing.projection_runner`: the runner on Kafka;
- :mod:`~riverbed.eventsourcing.projection_changelog`: the model as a compacted topic,
  written with a transactional producer, its position in a consumer group's offsets;
- :mod:`~riverbed.eventsourcing.projection_postgres`: the model as a PostgreSQL table, its
  position in a table beside it.

A read model is the aggregate type's state document (``AggregateType.document``), which holds
no personal field (``AggregateType``'s rule: forgetting a user could not reach a copy), so
a projection folds events as they are stored and needs none of the key topic's keys.

Errors::

    ProjectionError       (an EventSourcingError) the projection cannot go on: no broker, no
    │                     events topic, a store it cannot reach, an event it cannot fold
    └── CommitFailed      a batch the store did not apply, and it is as it was before the
                          batch: the runner restores from the store and goes on
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from riverbed.eventsourcing.aggregate_type import AggregateType
from riverbed.eventsourcing.errors import EventSourcingError, MessageError, ReplayError
from riverbed.eventsourcing.handling import Aggregate, replay

__all__ = [
    "Batch",
    "CommitFailed",
    "ProjectionError",
    "ProjectionFold",
    "ProjectionStore",
    "Restored",
]

S = TypeVar("S")
C = TypeVar("C")
E = TypeVar("E")


class ProjectionError(EventSourcingError):
    """The projection cannot go on (the message says why, in one line)."""


class CommitFailed(ProjectionError):
    """The store did not apply a batch and is as it was before it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Restored(Generic[S]):
    """What a store holds: its model's aggregates and the position they were folded to
    (events partition -> the offset of the next event to fold; none: the start)."""

    aggregates: Mapping[str, Aggregate[S]]
    positions: Mapping[int, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch(Generic[S]):
    """The aggregates some events changed (each once, as it is after them, by id) and the
    position after those events, for a store to apply in one transaction."""

    aggregates: Sequence[Aggregate[S]]
    positions: Mapping[int, int]
    events: int
    """How many events the batch folded (repeats included)."""


class ProjectionStore(Protocol[S]):
    """A read model and its position, changed together or not at all.

    The runner calls, on its own thread, in this order: :meth:`start` once; :meth:`clear`
    (for a rebuild); :meth:`restore`; :meth:`commit` once a batch, any number of times;
    :meth:`restore` again after a :class:`CommitFailed`; :meth:`close` once, whatever
    happened (also after a failed :meth:`start`).
    """

    @property
    def name(self) -> str:
        """The model, for progress lines: ``topic shop.carts.state``, ``table carts``."""
        ...

    def start(self, *, partitions: int) -> None:
        """Connect, make the model if it is missing (empty, with no position) and fence off a
        predecessor (a killed runner's half-done batch is undone now, if the store has one).
        ``partitions`` is the events topic's partition count."""
        ...

    def clear(self) -> None:
        """Replace the model with a new, empty one whose position is the start. Crash-safe: a
        runner killed in the middle finds either the old model or the empty one, each with
        a position that is true of it."""
        ...

    def restore(self) -> Restored[S]:
        """The model's aggregates and position, as committed."""
        ...

    def commit(self, batch: Batch[S]) -> None:
        """Apply ``batch`` (its aggregates and its position) in one transaction."""
        ...

    def close(self) -> None: ...


@dataclass(slots=True)
class ProjectionFold(Generic[S, C, E]):
    """A projection's aggregates and position, folded one event record at a time; the
    changes since the last :meth:`take`. No I/O: the runner feeds it the events topic's
    records and hands what :meth:`take` returns to the store.

    An event whose version the aggregate already has is a *repeat* and changes nothing: the
    model may be ahead of its position only after a rebuild killed between resetting the
    position and emptying the model (``ProjectionStore.clear``), and then the fold goes
    over events the model already holds. A version gap is a :class:`ProjectionError`: the
    events topic is not what a command processor writes, or the model is not this fold's.
    """

    kind: AggregateType[S, C, E]
    aggregates: dict[str, Aggregate[S]] = field(default_factory=dict)
    positions: dict[int, int] = field(default_factory=dict)
    repeats: int = 0
    _changed: dict[str, Aggregate[S]] = field(default_factory=dict)
    _events: int = 0

    @classmethod
    def restored(cls, kind: AggregateType[S, C, E], model: Restored[S]) -> ProjectionFold[S, C, E]:
        return cls(kind=kind, aggregates=dict(model.aggregates), positions=dict(model.positions))

    def apply(self, partition: int, offset: int, value: bytes | None) -> None:
        """The record at ``offset`` of events partition ``partition``, in offset order per
        partition; a record before the position (already folded) is passed over."""
        if offset < self.positions.get(partition, 0):
            return
        where = f"{self.kind.topics.events}/{partition}@{offset}"
        try:
            event = self.kind.format.decode_event(value)
        except MessageError as e:
            raise ProjectionError(f"cannot fold {where}: {e}") from None
        self.positions[partition] = offset + 1
        self._events += 1
        aggregate_id = event.aggregate_id
        current = self.aggregates.get(aggregate_id) or self.kind.initial(aggregate_id)
        if event.version <= current.version:
            self.repeats += 1
            return
        try:
            after = replay(self.kind.decider, self.kind.types, current, [event])
        except (MessageError, ReplayError) as e:
            raise ProjectionError(f"cannot fold {where}: {e}") from None
        self.aggregates[aggregate_id] = self._changed[aggregate_id] = after

    def take(self) -> Batch[S] | None:
        """What changed since the last call (None if no event was folded since)."""
        if not self._events:
            return None
        batch = Batch(
            aggregates=[self._changed[k] for k in sorted(self._changed)],
            positions=dict(self.positions),
            events=self._events,
        )
        self._changed.clear()
        self._events = 0
        return batch

    def documents(self) -> dict[str, dict[str, Any]]:
        """The model as state documents, by aggregate id."""
        return {k: self.kind.document(a) for k, a in sorted(self.aggregates.items())}
