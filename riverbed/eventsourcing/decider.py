"""The decider: an aggregate as three plain functions, no base class.

    decide(state, command) -> [event, ...] | Rejection     may refuse; never changes state
    evolve(state, event)   -> state                         never refuses: events are facts
    initial                                                 the state before any event

State is derived only by folding events with ``evolve``; ``decide`` only reads it. So the
same events always give the same state (replay, snapshots and time travel rely on it), and a
command's outcome depends only on the state and the command. States, commands and events
are the user's own immutable values (frozen dataclasses in the shop's carts).

Nothing here knows Kafka: :mod:`riverbed.eventsourcing.handling` adds versions and command
ids around :meth:`Decider.decide`, the processor adds the log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Decider", "Rejection"]

S = TypeVar("S")
C = TypeVar("C")
E = TypeVar("E")


@dataclass(frozen=True, slots=True, kw_only=True)
class Rejection:
    """A refused command, and why (a short reason, e.g. ``"cart_checked_out"``)."""

    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Decider(Generic[S, C, E]):
    """An aggregate's behaviour: see the module docstring."""

    initial: S
    decide: Callable[[S, C], Sequence[E] | Rejection]
    evolve: Callable[[S, E], S]

    def fold(self, events: Iterable[E], state: S | None = None) -> S:
        """The state after ``events``, starting from ``state`` (the initial one if None)."""
        current = self.initial if state is None else state
        for event in events:
            current = self.evolve(current, event)
        return current
