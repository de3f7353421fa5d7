"""Everything the processor, the readers and the projections need to know about one kind of
aggregate, in one value: its decider, its wire types, its topics, its personal fields and
its state as JSON (for snapshots and read models).

    state document   {ID, "user_id", "version", **state_fields(state)}
    snapshot value   the state document + {"offset": the offset of the last event it includes}

``ID`` is the format's id field; ``state_fields`` and ``state_of`` are the domain's (the
carts': ``{"items", "checked_out"}``). A state must not hold personal fields: snapshots and
read models are not sealed, so forgetting a subject would not reach them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from riverbed.eventsourcing.decider import Decider
from riverbed.eventsourcing.handling import Aggregate, DomainTypes
from riverbed.eventsourcing.messages import (
    StreamFormat,
    count_field,
    dumps,
    loads_object,
    maybe_text_field,
    text_field,
)
from riverbed.eventsourcing.topics import Topics

__all__ = ["AggregateType", "Snapshot"]

S = TypeVar("S")
C = TypeVar("C")
E = TypeVar("E")


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot(Generic[S]):
    """An aggregate as of the event at ``offset`` of its events partition."""

    aggregate: Aggregate[S]
    offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AggregateType(Generic[S, C, E]):
    """One kind of aggregate (see the module docstring)."""

    name: str
    decider: Decider[S, C, E]
    types: DomainTypes[C, E]
    format: StreamFormat
    topics: Topics
    state_fields: Callable[[S], dict[str, Any]]
    """The domain's fields of a state document."""
    state_of: Callable[[Mapping[str, Any]], S]
    """The state a document's domain fields describe; MessageError if they do not."""
    personal: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Event type -> its data fields sealed with the subject's key."""

    def no_topic(self, topic: str, bootstrap: str) -> str:
        """What a reader of ``topic`` says when the brokers at ``bootstrap`` lack it."""
        return (
            f"no topic {topic} at {bootstrap} (has a command processor for {self.name} run there?)"
        )

    def initial(self, aggregate_id: str) -> Aggregate[S]:
        return Aggregate(aggregate_id=aggregate_id, state=self.decider.initial, version=0)

    def document(self, aggregate: Aggregate[S]) -> dict[str, Any]:
        """``aggregate`` as the contract's state document."""
        return {
            self.format.id_field: aggregate.aggregate_id,
            "user_id": aggregate.subject,
            "version": aggregate.version,
            **self.state_fields(aggregate.state),
        }

    def aggregate_of(self, document: Mapping[str, Any]) -> Aggregate[S]:
        """The aggregate a state document describes (:meth:`document`'s inverse); a
        :class:`~riverbed.eventsourcing.errors.MessageError` if it is not one."""
        fields = dict(document)
        return Aggregate(
            aggregate_id=text_field(fields, self.format.id_field),
            state=self.state_of(fields),
            version=count_field(fields, "version"),
            subject=maybe_text_field(fields, "user_id"),
        )

    def encode_snapshot(self, snapshot: Snapshot[S]) -> tuple[bytes, bytes]:
        document = {**self.document(snapshot.aggregate), "offset": snapshot.offset}
        return self.format.key(snapshot.aggregate.aggregate_id), dumps(document)

    def decode_snapshot(self, value: bytes | None) -> Snapshot[S]:
        document = loads_object(value, "snapshot")
        return Snapshot(
            aggregate=self.aggregate_of(document), offset=count_field(document, "offset")
        )
