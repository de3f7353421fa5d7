"""What a command processor holds for one partition of the commands topic, without I/O.

The processor is the single writer of its partitions' aggregates: it owns partition P of
the commands topic (through a consumer group) and writes the events and results of P's
commands to partition P of the events and results topics. Kafka has no "append if the log
ends at offset N" (KIP-27 was never adopted); ownership plus fencing gives the same
guarantee: a processor that lost P is fenced by the group's generation and its
transactional id before its writes can commit, so one decider at a time sees a cart.

From partition P of the events topic (after a snapshot, if any) it rebuilds each cart's
:class:`~riverbed.eventsourcing.handling.Aggregate`; from partition P of the results topic
the command ids already decided and their results. Then :meth:`CommandPartition.handle`
answers each command:

- a command id already decided: its earlier result again, no event;
- otherwise the decider's answer (:func:`~riverbed.eventsourcing.handling.decide`), with
  the personal fields of the events sealed with the subject's key (a new key is made, and
  returned for the key topic, the first time a subject needs one);
- a command in another partition than murmur2 of its aggregate's key chooses: rejected
  (``wrong_partition``), since its aggregate's events are not here;
- a command that is not one at all (no JSON, no command id): nothing to answer, reported.

The processor writes what :meth:`handle` returns, with the consumed offset, in one Kafka
transaction; if that transaction aborts, it restores the partition from the topics again
(:meth:`handle` has already moved the in-memory state on).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from riverbed.client.partitioner import murmur2_partition
from riverbed.eventsourcing.aggregate_type import AggregateType
from riverbed.eventsourcing.errors import MessageError, ReplayError
from riverbed.eventsourcing.handling import Aggregate, decide, domain_event
from riverbed.eventsourcing.messages import REJECTED, Event, Result, loads_object
from riverbed.eventsourcing.shredding import (
    Keyring,
    new_key,
    new_key_id,
    open_fields,
    seal_fields,
)

__all__ = ["INVALID_COMMAND", "WRONG_PARTITION", "CommandPartition", "Handled", "Restoring"]

INVALID_COMMAND = "invalid_command"
"""The reason given for a command whose fields are not the contract's."""
WRONG_PARTITION = "wrong_partition"
"""The reason given for a command sent to another partition than the one Kafka's Java
clients choose for its aggregate's key (whose events live there): its sender partitions
otherwise. Its result's version is 0: this partition does not know the aggregate."""

S = TypeVar("S")
C = TypeVar("C")
E = TypeVar("E")


@dataclass(frozen=True, slots=True, kw_only=True)
class Handled:
    """What one command produced: its result, its events, and the subjects that got a new
    key (whose key records, :meth:`~riverbed.eventsourcing.shredding.Keyring.record`, go in
    the same transaction)."""

    result: Result
    events: list[Event]
    new_keys: list[str]
    duplicate: bool


@dataclass(slots=True, kw_only=True)
class CommandPartition(Generic[S, C, E]):
    """One commands-topic partition's aggregates and decided command ids."""

    kind: AggregateType[S, C, E]
    keyring: Keyring
    number: int = 0
    """This partition's number ..."""
    count: int = 1
    """... of this many partitions of the commands topic."""
    aggregates: dict[str, Aggregate[S]] = field(default_factory=dict)
    results: dict[str, Result] = field(default_factory=dict)

    def aggregate(self, aggregate_id: str) -> Aggregate[S]:
        found = self.aggregates.get(aggregate_id)
        return self.kind.initial(aggregate_id) if found is None else found

    def restore_snapshot(self, aggregate: Aggregate[S]) -> None:
        """Start ``aggregate``'s replay from a snapshot (before its later events)."""
        self.aggregates[aggregate.aggregate_id] = aggregate

    def restoring(self) -> Restoring[S, C, E]:
        """A fold of the partition's events, in log order, into its aggregates (after
        their snapshots); they are updated when it is closed."""
        return Restoring(self)

    def restore_result(self, result: Result) -> None:
        """One result of the partition: its command id is decided."""
        self.results.setdefault(result.command_id, result)

    def handle(self, value: bytes | None) -> Handled:
        """The answer to one command record (see the module docstring); raises
        :class:`~riverbed.eventsourcing.errors.MessageError` only for a record with no
        readable command id and aggregate id, which cannot be answered."""
        try:
            command = self.kind.format.decode_command(value)
        except MessageError:
            return self._invalid(value)
        earlier = self.results.get(command.command_id)
        if earlier is not None:
            return Handled(result=earlier, events=[], new_keys=[], duplicate=True)
        if self._elsewhere(command.aggregate_id):
            return self._rejected(command.command_id, command.aggregate_id, WRONG_PARTITION)
        decision = decide(
            self.kind.decider, self.kind.types, self.aggregate(command.aggregate_id), command
        )
        new_keys: list[str] = []
        events = [self._sealed(event, new_keys) for event in decision.events]
        self.aggregates[command.aggregate_id] = decision.aggregate
        self.results[command.command_id] = decision.result
        return Handled(result=decision.result, events=events, new_keys=new_keys, duplicate=False)

    def _sealed(self, event: Event, new_keys: list[str]) -> Event:
        fields = self.kind.personal.get(event.type, ())
        subject = event.user_id
        if not fields or subject is None:
            return event
        sealing = self.keyring.sealing_key(subject)
        if sealing is None:
            sealing = new_key_id(), new_key()
            self.keyring.add(subject, *sealing)
            new_keys.append(subject)
        key_id, key = sealing
        data = seal_fields(event.data, fields, key_id=key_id, key=key, subject=subject)
        return dataclasses.replace(event, data=data)

    def _invalid(self, value: bytes | None) -> Handled:
        """A rejected result for a record that names its command and aggregate but is not
        a valid command; a MessageError for one that does not name them."""
        command_id, aggregate_id = self.kind.format.command_ids(value)
        earlier = self.results.get(command_id)
        if earlier is not None:
            return Handled(result=earlier, events=[], new_keys=[], duplicate=True)
        reason = WRONG_PARTITION if self._elsewhere(aggregate_id) else INVALID_COMMAND
        return self._rejected(command_id, aggregate_id, reason)

    def _elsewhere(self, aggregate_id: str) -> bool:
        """Whether the aggregate's events live in another partition than this one."""
        if self.count == 1 or aggregate_id in self.aggregates:  # its events are here
            return False
        key = self.kind.format.key(aggregate_id)
        return murmur2_partition(key, self.count) != self.number

    def _rejected(self, command_id: str, aggregate_id: str, reason: str) -> Handled:
        result = Result(
            command_id=command_id,
            aggregate_id=aggregate_id,
            status=REJECTED,
            version=0 if reason == WRONG_PARTITION else self.aggregate(aggregate_id).version,
            reason=reason,
        )
        self.results[command_id] = result
        return Handled(result=result, events=[], new_keys=[], duplicate=False)


class Restoring(Generic[S, C, E]):
    """A partition's events folded into its aggregates as they are read, once per
    assignment: every event passes here, so no object is made per event but the domain's
    (an aggregate's state, version and subject are kept in a list until :meth:`close`),
    and the usual event takes one call (a call more per event cost 5% of a replay).
    Events a snapshot includes (a version not above the aggregate's) are skipped. Use it as
    a context manager: the aggregates are updated when the block ends without an error."""

    def __init__(self, partition: CommandPartition[S, C, E]) -> None:
        kind = partition.kind
        self._partition = partition
        self._format = kind.format
        self._parts = kind.format.event_parts
        self._initial = kind.decider.initial
        self._evolve = kind.decider.evolve
        self._types = kind.types
        self._event_of = kind.types.event_of
        self._schemas = kind.types.upcasters.current
        self._personal = kind.personal
        self._keyring = partition.keyring
        self._folds: dict[str, list[Any]] = {}  # aggregate id -> [state, version, subject]
        self.read = 0
        """Events given to it so far (those a snapshot includes too)."""

    def __enter__(self) -> Restoring[S, C, E]:
        return self

    def __exit__(self, error: type[BaseException] | None, *_: object) -> None:
        if error is None:
            self.close()

    def value(self, value: bytes | None) -> None:
        """One record of the events partition, as read; a
        :class:`~riverbed.eventsourcing.errors.EventSourcingError` if it is not an event
        that continues its aggregate."""
        fields = loads_object(value, "event")
        parts = self._parts(fields)
        if parts is None:  # names the first wrong field, or reads what the quick check refuses
            event = self._format.event_of(fields)
            parts = (
                event.aggregate_id, event.version, event.type, event.schema, event.data,
                event.user_id, event.event_id,
            )  # fmt: skip
        aggregate_id, version, event_type, schema, data, user_id, event_id = parts
        self.read += 1
        fold = self._folds.get(aggregate_id)
        if fold is None:
            known = self._partition.aggregates.get(aggregate_id)
            fold = (
                [self._initial, 0, None]
                if known is None
                else [known.state, known.version, known.subject]
            )
            self._folds[aggregate_id] = fold
        if version <= fold[1]:
            return
        if version != fold[1] + 1:
            raise ReplayError(f"{aggregate_id}: event version {version} after {fold[1]}")
        sealed = self._personal.get(event_type)
        if sealed and user_id is not None:
            keys = self._keyring.keys_of(user_id)
            data = open_fields(data, sealed, keys=keys, subject=user_id)
        if schema == self._schemas.get(event_type, 1):  # no upcasting: domain_event's fast way
            try:
                domain = self._event_of(event_type, data)
            except MessageError:
                domain = domain_event(self._types, event_type, schema, data, event_id)  # raises
        else:
            domain = domain_event(self._types, event_type, schema, data, event_id)
        fold[0] = self._evolve(fold[0], domain)
        fold[1] = version
        if version == 1:
            fold[2] = user_id  # an aggregate's subject: the user of its first event

    def close(self) -> None:
        """The folded aggregates into the partition."""
        aggregates = self._partition.aggregates
        for aggregate_id, (state, version, subject) in self._folds.items():
            aggregates[aggregate_id] = Aggregate(
                aggregate_id=aggregate_id, state=state, version=version, subject=subject
            )
        self._folds.clear()
