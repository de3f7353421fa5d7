"""One command against one aggregate: the contract's rules around a decider, no I/O.

    expected_version given and != the aggregate's version  -> rejected "version_conflict"
    a command the domain types cannot read                  -> rejected with their reason
    the decider's Rejection                                 -> rejected with its reason
    otherwise                                               -> accepted: its events get the
                                                               versions after the aggregate's,
                                                               the command's id, user and ts

An event's id is ``AGGREGATE_ID:VERSION``: unique among committed events (versions are), and
the same when a command is decided again after an aborted transaction. A command id already
decided is the processor's business (it answers with the earlier result and decides nothing);
here every command is new.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from riverbed.eventsourcing.decider import Decider, Rejection
from riverbed.eventsourcing.errors import MessageError, ReplayError
from riverbed.eventsourcing.messages import ACCEPTED, REJECTED, Command, Event, Result
from riverbed.eventsourcing.upcasting import Upcasters

__all__ = [
    "VERSION_CONFLICT",
    "Aggregate",
    "Decision",
    "DomainTypes",
    "decide",
    "domain_event",
    "replay",
]

VERSION_CONFLICT = "version_conflict"
"""The contract's reason for a command whose ``expected_version`` is not the aggregate's."""

S = TypeVar("S")
C = TypeVar("C")
E = TypeVar("E")


@dataclass(frozen=True, slots=True, kw_only=True)
class DomainTypes(Generic[C, E]):
    """How an aggregate's commands and events look on the wire.

    ``command_of`` reads a command's ``type`` and ``data`` (a :class:`Rejection` if it
    cannot: an unknown type, a missing field); ``event_of`` reads an event's ``type`` and
    ``data``, already upcast to its current schema (a
    :class:`~riverbed.eventsourcing.errors.MessageError` if it cannot, which the caller
    completes with the event's id); ``event_data`` gives a domain event's type and data.
    """

    command_of: Callable[[Command], C | Rejection]
    event_of: Callable[[str, dict[str, Any]], E]
    event_data: Callable[[E], tuple[str, dict[str, Any]]]
    upcasters: Upcasters = dataclasses.field(default_factory=Upcasters)


@dataclass(frozen=True, slots=True, kw_only=True)
class Aggregate(Generic[S]):
    """An aggregate's state after its first ``version`` events (0: none yet), and its
    ``subject``: the user of its first event, whose key encrypts its personal data."""

    aggregate_id: str
    state: S
    version: int
    subject: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision(Generic[S]):
    """A command's result, its events (none if rejected) and the aggregate after them."""

    result: Result
    events: list[Event]
    aggregate: Aggregate[S]


def decide(
    decider: Decider[S, C, E],
    types: DomainTypes[C, E],
    aggregate: Aggregate[S],
    command: Command,
) -> Decision[S]:
    """The contract's answer to ``command`` (see the module docstring)."""

    def rejected(reason: str) -> Decision[S]:
        result = Result(
            command_id=command.command_id,
            aggregate_id=aggregate.aggregate_id,
            status=REJECTED,
            version=aggregate.version,
            reason=reason,
        )
        return Decision(result=result, events=[], aggregate=aggregate)

    if command.expected_version is not None and command.expected_version != aggregate.version:
        return rejected(VERSION_CONFLICT)
    domain_command = types.command_of(command)
    if isinstance(domain_command, Rejection):
        return rejected(domain_command.reason)
    outcome = decider.decide(aggregate.state, domain_command)
    if isinstance(outcome, Rejection):
        return rejected(outcome.reason)
    events: list[Event] = []
    state, version = aggregate.state, aggregate.version
    for domain_event in outcome:
        version += 1
        state = decider.evolve(state, domain_event)
        event_type, data = types.event_data(domain_event)
        events.append(
            Event(
                event_id=f"{aggregate.aggregate_id}:{version}",
                aggregate_id=aggregate.aggregate_id,
                user_id=command.user_id,
                version=version,
                type=event_type,
                data=data,
                command_id=command.command_id,
                ts=command.ts,
                schema=types.upcasters.schema_of(event_type),
            )
        )
    subject = aggregate.subject if aggregate.version or not events else command.user_id
    after = Aggregate(
        aggregate_id=aggregate.aggregate_id, state=state, version=version, subject=subject
    )
    result = Result(
        command_id=command.command_id,
        aggregate_id=aggregate.aggregate_id,
        status=ACCEPTED,
        version=version,
    )
    return Decision(result=result, events=events, aggregate=after)


def replay(
    decider: Decider[S, C, E],
    types: DomainTypes[C, E],
    aggregate: Aggregate[S],
    events: Iterable[Event],
) -> Aggregate[S]:
    """``aggregate`` after ``events`` (upcast first), which must continue its versions."""
    state, version, subject = aggregate.state, aggregate.version, aggregate.subject
    for event in events:
        if event.version != version + 1:
            raise ReplayError(
                f"{aggregate.aggregate_id}: event version {event.version} after {version}"
            )
        state = decider.evolve(
            state, domain_event(types, event.type, event.schema, event.data, event.event_id)
        )
        subject = event.user_id if version == 0 else subject
        version = event.version
    return Aggregate(
        aggregate_id=aggregate.aggregate_id, state=state, version=version, subject=subject
    )


def domain_event(
    types: DomainTypes[C, E], event_type: str, schema: int, data: dict[str, Any], event_id: str
) -> E:
    """A stored event as its domain event: its data upcast to the current schema, then read
    by the domain's ``event_of`` (a MessageError from it names the event)."""
    current = types.upcasters.data_of(event_type, schema, data, event_id=event_id)
    try:
        return types.event_of(event_type, current)
    except MessageError as e:
        raise MessageError(f"event {event_id} ({event_type} version {schema}): {e}") from None
