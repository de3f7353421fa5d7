"""As-of lookups in a table known by its CDC changelog: one key's versions (pure logic of
:mod:`riverbed.pipelines.operators.as_of_join`; nothing here knows Spark).

A :class:`VersionedRow` is one key's history (one user's profile): versions ``(ts_ms,
position, row | None)``, None for a deletion, ordered by ``(ts_ms, position)`` so that of
two changes at the same time the later position wins. :meth:`VersionedRow.as_of` is the
row of the latest version with ``ts_ms <= ts`` (None if that version is a deletion, or if
there is none). Versions may arrive in any order (a late change);
:meth:`VersionedRow.changed_by`, called before :meth:`VersionedRow.add`, says which of the
lookups already answered get a different answer, so the operator can emit corrected rows.
A version whose position is already known is a replay: ignored. Tombstones add nothing
(the delete before them recorded the deletion), nor do truncates.
:meth:`VersionedRow.prune` drops what no lookup at or after the watermark can need: every
version before the latest one at or below it (that one is kept, deletion or not, as it
hides a late change older than itself). Lookups below the last pruning watermark are no
longer exact: the operator treats such clicks as late.

The versions round-trip through a JSON string (:meth:`VersionedRow.to_json`).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from riverbed.pipelines.operators.changelog import Change, Op, SourcePosition
from riverbed.pipelines.operators.rows import Json, Row, dumps

__all__ = ["Version", "VersionedRow"]

L = TypeVar("L")


@dataclass(frozen=True, slots=True, kw_only=True)
class Version:
    ts_ms: int
    position: SourcePosition
    row: Row | None
    """None: the key was deleted."""

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
        return cls(ts_ms=change.ts_ms, position=change.position, row=row)


def _order(version: Version) -> tuple[int, SourcePosition]:
    return version.ts_ms, version.position


def _ts(version: Version) -> int:
    return version.ts_ms


class VersionedRow:
    """One key's versions, for as-of lookups (module docstring)."""

    def __init__(self, versions: Iterable[Version] = ()) -> None:
        self._versions: list[Version] = []
        self._positions: set[SourcePosition] = set()
        for version in versions:
            self.add(version)

    @property
    def versions(self) -> tuple[Version, ...]:
        """Oldest first."""
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
        """The row of the latest version at or before ``ts_ms`` (None: deleted or unknown)."""
        i = bisect.bisect_right(self._versions, ts_ms, key=_ts)
        return self._versions[i - 1].row if i else None

    def changed_by(self, version: Version, lookups: Iterable[tuple[L, int]]) -> list[L]:
        """The ids of the ``(id, ts_ms)`` lookups whose :meth:`as_of` answer changes when
        ``version`` is added (call it before :meth:`add`)."""
        if version.position in self._positions:
            return []
        i = bisect.bisect_left(self._versions, _order(version), key=_order)
        previous = self._versions[i - 1].row if i else None
        if previous == version.row:
            return []
        # The new version answers [its ts, the next version's ts); the previous one did.
        start = version.ts_ms
        end = self._versions[i].ts_ms if i < len(self._versions) else None
        return [name for name, ts in lookups if start <= ts and (end is None or ts < end)]

    def prune(self, watermark_ms: int) -> None:
        """Drop the versions before the latest one at or below ``watermark_ms``."""
        i = bisect.bisect_right(self._versions, watermark_ms, key=_ts) - 1
        if i > 0:
            self._positions.difference_update(v.position for v in self._versions[:i])
            del self._versions[:i]

    def to_obj(self) -> list[list[Json]]:
        """The versions as JSON-able data; :meth:`to_json` is its JSON text."""
        return [[v.ts_ms, *v.position, v.row] for v in self._versions]

    @classmethod
    def from_obj(cls, data: list[list[Json]]) -> VersionedRow:
        """The state that :meth:`to_obj` gave (trusted: it is the operator's own)."""
        return cls(
            Version(ts_ms=ts, position=SourcePosition(commit_lsn, lsn), row=row)
            for ts, commit_lsn, lsn, row in data
        )

    def to_json(self) -> str:
        return dumps(self.to_obj())

    @classmethod
    def from_json(cls, text: str) -> VersionedRow:
        return cls.from_obj(json.loads(text))
