"""Upcasting: old events read as the current schema, the log left as it was.

An event is stored with the schema version of its type that wrote it (the ``schema`` field)
and never rewritten: the events topic is immutable. When a type's data changes shape, its
schema version goes up by one and an *upcaster* from the old version to the next is
registered; a reader runs the chain (v1 → v2 → v3 …) on every older event before
``evolve`` sees it, as Axon's chained upcasters do. So deciders and projections only ever
see the current shape.

An event of a version with no path to the current one, or newer than this code knows, is an
:class:`~riverbed.eventsourcing.errors.UpcastError`: reading on would fold it wrongly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from riverbed.eventsourcing.errors import UpcastError
from riverbed.eventsourcing.messages import Event

__all__ = ["Upcaster", "Upcasters"]

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
"""An event's ``data`` at schema version N to its data at N + 1 (a new dict)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Upcasters:
    """The current schema version of each event type, and the steps up to it.

    ``current`` maps an event type to its current version (a type not listed is at 1);
    ``steps`` maps ``(type, N)`` to the upcaster from N to N + 1.
    """

    current: Mapping[str, int] = field(default_factory=dict)
    steps: Mapping[tuple[str, int], Upcaster] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for (event_type, version), _ in self.steps.items():
            if not 1 <= version < self.schema_of(event_type):
                raise ValueError(
                    f"an upcaster of {event_type} from version {version}, but its current "
                    f"version is {self.schema_of(event_type)}"
                )

    def schema_of(self, event_type: str) -> int:
        """The version new events of ``event_type`` are written with."""
        return self.current.get(event_type, 1)

    def upcast(self, event: Event) -> Event:
        """``event`` in its type's current schema (itself if it already is)."""
        target = self.schema_of(event.type)
        if event.schema == target:
            return event
        data = self.data_of(event.type, event.schema, event.data, event_id=event.event_id)
        return dataclasses.replace(event, data=data, schema=target)

    def data_of(
        self, event_type: str, schema: int, data: dict[str, Any], *, event_id: str
    ) -> dict[str, Any]:
        """An event's ``data`` in its type's current schema (``data`` itself if it already
        is); ``event_id`` names the event in an :class:`UpcastError`."""
        target = self.current.get(event_type, 1)
        if schema == target:
            return data
        if schema > target:
            raise UpcastError(
                f"event {event_id} is {event_type} version {schema}; this code knows "
                f"versions up to {target}"
            )
        for version in range(schema, target):
            step = self.steps.get((event_type, version))
            if step is None:
                raise UpcastError(
                    f"event {event_id} is {event_type} version {schema}, and no upcaster "
                    f"leads from version {version} to {version + 1}"
                )
            data = step(dict(data))
        return data
