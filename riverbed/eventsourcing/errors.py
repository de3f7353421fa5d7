"""Errors of event sourcing, one hierarchy.

    EventSourcingError          anything the framework refuses on purpose
    ├── MessageError            bytes that are not a command, event or result of the
    │                           contract (the message names the field and what it holds)
    ├── UpcastError             an event of a schema version no upcaster chain leads from
    └── ReplayError             events that do not continue an aggregate's versions (a gap
                                or a repeat: the log is not what the processor wrote)

A command the domain refuses is not an error: the decider returns a
:class:`~riverbed.eventsourcing.decider.Rejection`, and the processor answers it with a
``rejected`` result. Every message is one line.
"""

from __future__ import annotations


class EventSourcingError(Exception):
    """Base class of every error riverbed.eventsourcing raises on purpose."""


class MessageError(EventSourcingError):
    """Not a command, event or result as the contract writes them."""


class UpcastError(EventSourcingError):
    """An event whose schema version cannot be brought to the current one."""


class ReplayError(EventSourcingError):
    """Events that do not continue an aggregate's versions one by one."""
