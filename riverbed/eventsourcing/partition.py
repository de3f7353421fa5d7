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
from typing import Generic, TypeVar

from riverbed.client.partitioner import murmur2_partition
from riverbed.eventsourcing.aggregate_type import AggregateType
from riverbed.eventsourcing.errors import MessageError
from riverbed.eventsourcing.handling import Aggregate, decide, replay
from riverbed.eventsourcing.messages import REJECTED, Event, Result
from riverbed.eventsourcing.shredding import Keyring, new_key, new_key_id, opened, seal_fields

__all__ = ["INVALID_COMMAND", "WRONG_PARTITION", "CommandPartition", "Handled"]

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

    def restore_event(self, event: Event) -> None:
        """One event of the partition, in log order (events a snapshot includes are
        skipped)."""
        current = self.aggregate(event.aggregate_id)
        if event.version <= current.version:
            return
        self.aggregates[event.aggregate_id] = replay(
            self.kind.decider, self.kind.types, current, [self.opened(event)]
        )

    def restore_result(self, result: Result) -> None:
        """One result of the partition: its command id is decided."""
        self.results.setdefault(result.command_id, result)

    def opened(self, event: Event) -> Event:
        """``event`` with its personal fields opened (``None`` for a forgotten subject)."""
        return opened(event, self.kind.personal, self.keyring)

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
