"""The topics of one event-sourced aggregate type (DESIGN.md, "Event sourcing")."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Topics"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Topics:
    """Commands in; events (the source of truth), results, snapshots and subjects' keys out.
    Commands, events and results have the same partition count."""

    commands: str
    events: str
    results: str
    snapshots: str
    keys: str
