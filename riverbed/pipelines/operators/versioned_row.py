"""As-of lookups in a table known by its CDC changelog: one key's versions (the pure logic
of :mod:`riverbed.pipelines.operators.as_of_join`; nothing here knows Spark).

A :class:`VersionedRow` is one key's history (one user's profile): its :class:`Version` s,
each a change's row (None for a deletion), its time ``ts_ms`` (``source.ts_ms``, the commit
time) and its position ``(source.commitLsn, source.lsn)``.

**Order.** A key's versions are ordered by the changelog itself (DESIGN.md, "Topics,
formats and time"): snapshot rows (``op: r``) first, then by position. Commit times need
not grow in that order (clocks, and the trigger-based capture's ``clock_timestamp()``,
can step back); the order never depends on them.

**As of a time.** :meth:`VersionedRow.as_of` ``(t)`` is the row of the *latest version in
changelog order* that is valid at ``t``: a change is valid from its ``ts_ms``; a snapshot
row says what the row was at the snapshot's consistent point, not when it was last
changed, so it is valid from the beginning of time (until the key's next change). None if
that version is a deletion, or if no version is valid at ``t``. So when a change has a
larger ``ts_ms`` than a later one, it answers no lookup at or after the later one's time.

**Corrections.** Versions may arrive in any order (a replay, a late change);
:meth:`VersionedRow.changed_by`, called before :meth:`VersionedRow.add`, says which of the
lookups already answered get a different answer, so the operator can emit corrected rows.
A version whose position is already known is a replay: ignored. Tombstones add nothing
(the delete before them recorded the deletion), nor do truncates.

**Pruning.** :meth:`VersionedRow.prune` ``(w)`` drops what no lookup at or after ``w`` can
need: every version before the latest one (in changelog order) valid at ``w``. That one
answers every lookup at or after ``w`` unless a later version does, and it is kept,
deletion or not, as it hides a late version older than itself. Lookups before the first
version kept's ``ts_ms`` are no longer exact after a prune that dropped versions: the
operator treats such events as late.

The versions round-trip through JSON (:meth:`VersionedRow.to_obj`, ``[[ts_ms, commit_lsn,
lsn, snapshot, row], ...]`` in changelog order).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from riverbed.pipelines.operators.changelog import Change, Op, SourcePosition
from riverbed.pipelines.operators.json_rows import Json, Row, dumps, loads

__all__ = ["BEGINNING_MS", "Version", "VersionedRow"]

L = TypeVar("L")

BEGINNING_MS = -(2**63)
"""The beginning of time: when a snapshot row becomes valid (the smallest Spark LONG)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Version:
    ts_ms: int
    """``source.ts_ms``: the commit time (a snapshot row's: when it was read)."""
    position: SourcePosition
    snapshot: bool
    """A snapshot row (``op: r``): first in the changelog order, valid from the beginning."""
    row: Row | None
    """None: the key was deleted."""

    @property
    def valid_from_ms(self) -> int:
        """The earliest lookup time this version may answer (module docstring)."""
        return BEGINNING_MS if self.snapshot else self.ts_ms

    @classmethod
    def of(cls, change: Change, columns: Sequence[str] | None = None) -> Version | None:
        """The version a change makes (only ``columns`` of its row, if given); None for a
        tombstone or a truncate. Placeholders of unchanged TOASTed values are kept as they
        are: versions may arrive out of order, so there is no previous row to take them from
        (profile columns are short; REPLICA IDENTITY FULL avoids placeholders)."""
        if change.op in (Op.TOMBSTONE, Op.TRUNCATE):
            return None
        assert change.ts_ms is not None and change.position is not None
        row = change.after
        if row is not None and columns is not None:
            row = {name: row.get(name) for name in columns}
        return cls(
            ts_ms=change.ts_ms, position=change.position, snapshot=change.op is Op.READ, row=row
        )


def _order(version: Version) -> tuple[bool, SourcePosition]:
    """The changelog order: snapshot rows first, then by position."""
    return not version.snapshot, version.position


class VersionedRow:
    """One key's versions, for as-of lookups (module docstring)."""

    def __init__(self, versions: Iterable[Version] = ()) -> None:
        self._versions: list[Version] = []
        self._positions: set[SourcePosition] = set()
        for version in versions:
            self.add(version)

    @property
    def versions(self) -> tuple[Version, ...]:
        """In changelog order."""
        return tuple(self._versions)

    def __len__(self) -> int:
        return len(self._versions)

    def add(self, version: Version) -> bool:
        """Add a version, in any order; False if its position is known (a replay)."""
        if version.position in self._positions:
            return False
        bisect.insort(self._versions, version, key=_order)
        self._positions.add(version.position)
        return True

    def as_of(self, ts_ms: int) -> Row | None:
        """The row of the latest version valid at ``ts_ms`` (None: deleted or unknown).
        Backwards from the latest: a lookup near the present stops at once."""
        for version in reversed(self._versions):
            if version.valid_from_ms <= ts_ms:
                return version.row
        return None

    def changed_by(self, version: Version, lookups: Iterable[tuple[L, int]]) -> list[L]:
        """The ids of the ``(id, ts_ms)`` lookups whose :meth:`as_of` answer changes when
        ``version`` is added (call it before :meth:`add`)."""
        if version.position in self._positions:
            return []
        i = bisect.bisect_left(self._versions, _order(version), key=_order)
        # The new version answers the lookups it is valid at unless a later version is
        # valid there too, and changes those whose answer now is another row.
        start = version.valid_from_ms
        end = min((v.valid_from_ms for v in self._versions[i:]), default=None)
        return [
            name
            for name, ts in lookups
            if start <= ts and (end is None or ts < end) and self.as_of(ts) != version.row
        ]

    def prune(self, watermark_ms: int) -> None:
        """Drop the versions before the latest one valid at ``watermark_ms``."""
        anchor = next(
            (
                i
                for i in range(len(self._versions) - 1, -1, -1)
                if self._versions[i].valid_from_ms <= watermark_ms
            ),
            0,
        )
        if anchor > 0:
            self._positions.difference_update(v.position for v in self._versions[:anchor])
            del self._versions[:anchor]

    def next_prune_ms(self) -> int | None:
        """The smallest watermark at which :meth:`prune` drops a version (None: it drops
        none, there being one version or none)."""
        return min((v.valid_from_ms for v in self._versions[1:]), default=None)

    def to_obj(self) -> list[list[Json]]:
        """The versions as JSON-able data (module docstring); :meth:`to_json` is its text."""
        return [[v.ts_ms, *v.position, v.snapshot, v.row] for v in self._versions]

    @classmethod
    def from_obj(cls, data: list[list[Json]]) -> VersionedRow:
        """The state that :meth:`to_obj` gave (trusted: it is the operator's own)."""
        return cls(
            Version(ts_ms=ts, position=SourcePosition(commit_lsn, lsn), snapshot=snapshot, row=row)
            for ts, commit_lsn, lsn, snapshot, row in data
        )

    def to_json(self) -> str:
        return dumps(self.to_obj())

    @classmethod
    def from_json(cls, text: str) -> VersionedRow:
        return cls.from_obj(loads(text))
