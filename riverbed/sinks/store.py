"""What a derived store is to a sink: a small class, so a user adds their own in one file.

A :class:`Store` keeps, beside its rows, the sink's *position*: per input partition, the
offset of the next record to apply. The runner (:mod:`riverbed.sinks.runner`) calls::

    store.open()
    store.positions()              # where to start (none: the beginning)
    loop:
        store.apply(changes)       # a batch, in the log's order (per key: as written)
        store.commit(positions)    # the batch and the new positions, atomically
    store.close()

Every call comes from one thread, the runner's thread for the store (not the main thread):
the runner reads and decodes the next batch meanwhile.

``commit`` is what makes a sink exactly-once in effect: a crash before it loses the batch
and the positions together, so the restarted sink applies the batch again from the old
positions; after it, both are there. Applying a change twice in a row is harmless as well
(each change sets a row to a value, or removes it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from riverbed.sinks.changes import Change

__all__ = ["Positions", "Store", "TopicPartition"]

TopicPartition = tuple[str, int]
Positions = Mapping[TopicPartition, int]
"""(topic, partition) -> the offset of the next record to apply."""


class Store(Protocol):
    name: str
    """What the store is called in messages: ``redis://127.0.0.1:6379/0``, a path."""

    def open(self) -> None:
        """Connect or open; a :class:`~riverbed.sinks.changes.SinkError` if it cannot."""

    def positions(self) -> dict[TopicPartition, int]:
        """The positions the last :meth:`commit` stored (empty for a new store)."""

    def apply(self, changes: Sequence[Change]) -> None:
        """Apply a batch of changes, in order; nothing is visible before :meth:`commit`."""

    def commit(self, positions: Positions) -> None:
        """Make the changes applied since the last commit visible, with ``positions``, in
        one atomic step."""

    def close(self) -> None:
        """Release the store (a batch applied and not committed is dropped)."""
