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

A store may also fold a batch where it is decoded, before it has the batch: a
:class:`StagingStore` gives a :class:`Stager` (the runner stages each change with it, in its
reading thread or in a decoder process, and takes the result per batch) and applies what it
took with ``apply_staged`` instead of ``apply``. What a stager takes must pickle.

``commit`` is what makes a sink exactly-once in effect: a crash before it loses the batch
and the positions together, so the restarted sink applies the batch again from the old
positions; after it, both are there. Applying a change twice in a row is harmless as well
(each change sets a row to a value, or removes it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from riverbed.sinks.changes import Change

__all__ = ["ChangeList", "Positions", "Stager", "StagingStore", "Store", "TopicPartition"]

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


class Stager(Protocol):
    def stage(self, change: Change) -> None:
        """Fold ``change`` into the batch (a SinkError for a change the store cannot take)."""

    def take(self) -> Any:
        """The batch staged so far, for the store's ``apply_staged``; the stager is then
        empty."""


@runtime_checkable
class StagingStore(Store, Protocol):
    def stager(self) -> Stager:
        """A new, empty stager (picklable)."""

    def apply_staged(self, staged: Any) -> None:
        """Apply what a stager of this store took, as :meth:`Store.apply` does."""


class ChangeList:
    """The stager of a store that has none: the batch is its changes, in order."""

    def __init__(self) -> None:
        self._changes: list[Change] = []

    def stage(self, change: Change) -> None:
        self._changes.append(change)

    def take(self) -> list[Change]:
        changes, self._changes = self._changes, []
        return changes
