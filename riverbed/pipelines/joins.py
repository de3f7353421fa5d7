"""Joins over CDC changelogs: as-of lookups in a versioned table, and aggregates kept up to
date over the inner join of two tables (pure logic; :mod:`riverbed.pipelines.changelog`
parses and orders the changes). Every state round-trips through a JSON string.

**As-of join** (``enriched_clicks``). A :class:`VersionedRow` is one key's history (one
user's profile): versions ``(ts_ms, position, row | None)``, None for a deletion, ordered
by ``(ts_ms, position)`` so that of two changes at the same time the later position wins.
:meth:`VersionedRow.as_of` is the row of the latest version with ``ts_ms <= ts`` (None if
that version is a deletion, or if there is none). Versions may arrive in any order (a late
change); :meth:`VersionedRow.changed_by`, called before :meth:`VersionedRow.add`, says
which of the lookups already answered get a different answer, so the operator can emit
corrected rows. A version whose position is already known is a replay: ignored.
Tombstones add nothing (the delete before them recorded the deletion), nor do truncates.
:meth:`VersionedRow.prune` drops what no lookup at or after the watermark can need: every
version before the latest one at or below it (that one is kept, deletion or not, as it
hides a late change older than itself). Lookups below the last pruning watermark are
no longer exact: the operator treats such clicks as late.

**Aggregate over a join** (``category_sales``: per category, the count, units and revenue
of the non-cancelled ``orders ⨝ products``). A :class:`JoinSpec` names the parts: the left
table (orders) is joined on its column ``join_key`` to the right table's primary key
(products: at most one right row per join key); each (left, right) pair gives measures
(integers, exact) or None (left out: a cancelled order), summed per ``group`` of the right
row (the category). Three grouped operators (in Spark, three ``transformWithStateInPandas``
operators of one query), each fed its input of one micro-batch at once:

0. :func:`route_left`, grouped by the *left key* (order_id): state = the order's
   :class:`~riverbed.pipelines.changelog.RowState`. It turns the order's changes into
   :class:`LeftRow` s, replace semantics, for the join keys they touch: "order X is now
   (this row | gone) under product P", a retraction under the old product when
   ``product_id`` changed and an upsert under the new one.
1. :class:`JoinKeyState`, grouped by the *join key* (product_id): state = the product's
   RowState and the left rows under it. It emits :class:`GroupContribution` s, replace
   semantics: "product P now contributes M to category G", with a zero M for the group it
   leaves (category change, product deleted, its last order deleted, cancelled or moved).
2. :class:`GroupState`, grouped by the *group* (category): state = join key ->
   contribution. Its total is the output row, None (a tombstone) once no row is left.

Why stage 0, rather than routing on the change's ``before``: under PostgreSQL's default
REPLICA IDENTITY, ``before`` is null for an update and holds only the key columns for a
delete, so the old ``product_id`` is unknown; a compacted topic may even have kept only
the tombstone of a deleted order. REPLICA IDENTITY FULL would give the old row, but then
stage 1 would also have to deduplicate replays per (product, order), keeping a marker for
every order that ever left a product. Stage 0 needs neither: it is the one place where an
order's changes are deduplicated, and it forwards only what changed, so the stages after
it need no positions. Its cost: one more shuffle, and one small state per order (kept
after a delete, like every RowState, so that replays stay ignored).

Each stage emits at most one row per (output key, batch), the net effect of the batch, so
the next stage may see a batch's rows in any order. Stage 1 recomputes the contribution of
a join key from its left rows when it changes (``O(orders of the product)``).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from riverbed.pipelines.changelog import (
    Change,
    Json,
    Op,
    Row,
    RowState,
    SourcePosition,
    json_text,
)

__all__ = [
    "CATEGORY_SALES",
    "Contribution",
    "GroupContribution",
    "GroupState",
    "JoinKeyState",
    "JoinSpec",
    "LeftRow",
    "Version",
    "VersionedRow",
    "route_left",
]

L = TypeVar("L")


def _dumps(value: Json) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


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
        return _dumps(self.to_obj())

    @classmethod
    def from_json(cls, text: str) -> VersionedRow:
        return cls.from_obj(json.loads(text))


@dataclass(frozen=True, slots=True)
class Contribution:
    """Aggregated measures: ``rows`` joined rows, and the sums of their measures."""

    rows: int
    sums: tuple[int, ...]

    def __add__(self, other: Contribution) -> Contribution:
        sums = tuple(a + b for a, b in zip(self.sums, other.sums, strict=True))
        return Contribution(self.rows + other.rows, sums)

    def __sub__(self, other: Contribution) -> Contribution:
        sums = tuple(a - b for a, b in zip(self.sums, other.sums, strict=True))
        return Contribution(self.rows - other.rows, sums)


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinSpec:
    """What to join and aggregate (module docstring)."""

    join_key: Callable[[Row], Json]
    """The join key of a left row (None: it joins nothing, as NULL in SQL)."""
    right_key: Callable[[Row], Json]
    """The join key of a right record, from its record key (the right table's key)."""
    group: Callable[[Row], Json]
    """The group of a right row (any JSON value; None is a group, as in SQL's GROUP BY)."""
    measures: Callable[[Row, Row], tuple[int, ...] | None]
    """The measures of a (left, right) pair, or None to leave the pair out."""
    left_columns: tuple[str, ...]
    """The columns of a left row that ``measures`` reads (stage 1 keeps only those)."""
    group_field: str
    count_field: str
    sum_fields: tuple[str, ...]

    def output(self, group: Json, total: Contribution | None) -> Row | None:
        """The output value of a group (None: a tombstone)."""
        if total is None:
            return None
        sums = dict(zip(self.sum_fields, total.sums, strict=True))
        return {self.group_field: group, self.count_field: total.rows, **sums}


def _integer(value: Json) -> int:
    """An integer column; null (or, not possible with the shop's types, a non-integer)
    counts as 0, as SQL's sum() leaves nulls out."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _sales(order: Row, product: Row) -> tuple[int, ...] | None:
    if order.get("status") == "cancelled":  # a null status is not "cancelled"
        return None
    quantity = _integer(order.get("quantity"))
    return quantity, quantity * _integer(product.get("price_cents"))


CATEGORY_SALES = JoinSpec(
    join_key=lambda order: order.get("product_id"),
    right_key=lambda key: key.get("product_id"),
    group=lambda product: product.get("category"),
    measures=_sales,
    left_columns=("quantity", "status"),
    group_field="category",
    count_field="orders",
    sum_fields=("units", "revenue_cents"),
)
"""``category_sales`` (DESIGN.md): orders ⨝ products on product_id, not cancelled."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LeftRow:
    """Stage 0's output: left row ``left_key`` is now ``row`` under ``join_key`` (None: it
    is no longer there)."""

    join_key: Json
    left_key: str
    """The canonical JSON text of the left record's key (:func:`json_text`)."""
    row: Row | None


def route_left(state: RowState, changes: Iterable[Change], spec: JoinSpec) -> list[LeftRow]:
    """Stage 0: apply one left key's changes (in log order) to its state; the LeftRows
    for the join keys whose row changed (a retraction under the old join key, an upsert
    under the new one; only ``spec.left_columns``)."""
    name: str | None = None
    old = _routed(state.row, spec)
    for change in changes:
        if name is not None and json_text(change.key) != name:
            raise ValueError(f"changes of two keys, {name} and {json_text(change.key)}")
        name = json_text(change.key)
        state.apply(change)
    new = _routed(state.row, spec)
    if name is None or new == old:
        return []
    routed: list[tuple[Json, Row | None]] = []
    if old is not None and (new is None or json_text(new[0]) != json_text(old[0])):
        routed.append((old[0], None))  # a retraction under the old join key
    if new is not None:
        routed.append(new)
    return [LeftRow(join_key=key, left_key=name, row=row) for key, row in routed]


def _routed(row: Row | None, spec: JoinSpec) -> tuple[Json, Row] | None:
    key = None if row is None else spec.join_key(row)
    if row is None or key is None:
        return None
    return key, {name: row.get(name) for name in spec.left_columns}


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupContribution:
    """Stage 1's output: ``join_key`` now contributes ``contribution`` to ``group`` (zero
    rows: nothing)."""

    group: Json
    join_key: Json
    contribution: Contribution


@dataclass(slots=True)
class JoinKeyState:
    """Stage 1: one join key's right row and the left rows under it."""

    right: RowState = field(default_factory=RowState)
    left: dict[str, Row] = field(default_factory=dict)
    """Left key (canonical JSON text) -> its ``spec.left_columns``."""

    def apply(
        self,
        join_key: Json,
        spec: JoinSpec,
        *,
        right: Iterable[Change] = (),
        left: Iterable[LeftRow] = (),
    ) -> list[GroupContribution]:
        """Apply one batch: the right table's changes of this key (in log order) and the
        LeftRows routed here. The contributions that changed (module docstring)."""
        old = self.contribution(spec)
        for change in right:
            self.right.apply(change)
        for row in left:
            if row.row is None:
                self.left.pop(row.left_key, None)
            else:
                self.left[row.left_key] = row.row
        new = self.contribution(spec)
        out = []
        if old is not None and (new is None or json_text(new[0]) != json_text(old[0])):
            zero = Contribution(0, (0,) * len(spec.sum_fields))
            out.append(GroupContribution(group=old[0], join_key=join_key, contribution=zero))
        if new is not None and new != old:
            out.append(GroupContribution(group=new[0], join_key=join_key, contribution=new[1]))
        return out

    def contribution(self, spec: JoinSpec) -> tuple[Json, Contribution] | None:
        """(group, what this join key contributes to it), None if nothing."""
        right = self.right.row
        if right is None:
            return None
        rows, sums = 0, [0] * len(spec.sum_fields)
        for left in self.left.values():
            measures = spec.measures(left, right)
            if measures is not None:
                rows += 1
                sums = [a + b for a, b in zip(sums, measures, strict=True)]
        return (spec.group(right), Contribution(rows, tuple(sums))) if rows else None

    def to_json(self) -> str:
        return _dumps({"right": self.right.as_json(), "left": self.left})

    @classmethod
    def from_json(cls, text: str) -> JoinKeyState:
        obj = json.loads(text)
        return cls(right=RowState.from_obj(obj["right"]), left=obj["left"])


class GroupState:
    """Stage 2: one group's contributions by join key, and their total."""

    def __init__(self, contributions: Iterable[tuple[Json, Contribution]] = ()) -> None:
        self._by_join_key: dict[str, Contribution] = {}
        self._total: Contribution | None = None
        self.apply(GroupContribution(group=None, join_key=key, contribution=contribution)
                   for key, contribution in contributions)  # fmt: skip

    @property
    def total(self) -> Contribution | None:
        """The sum of the contributions; None when no row is left (a tombstone)."""
        return self._total

    @property
    def contributions(self) -> dict[Json, Contribution]:
        return {json.loads(key): c for key, c in self._by_join_key.items()}

    def apply(self, rows: Iterable[GroupContribution]) -> bool:
        """Apply one batch of stage 1's rows for this group; True if the total changed."""
        before = self._total
        for row in rows:
            name = json_text(row.join_key)
            old = self._by_join_key.pop(name, None)
            if old is not None:
                assert self._total is not None
                self._total -= old
            if row.contribution.rows:
                self._by_join_key[name] = row.contribution
                total = self._total
                self._total = row.contribution if total is None else total + row.contribution
        if not self._by_join_key:
            self._total = None
        return self._total != before

    def to_json(self) -> str:
        return _dumps([[key, c.rows, list(c.sums)] for key, c in self._by_join_key.items()])

    @classmethod
    def from_json(cls, text: str) -> GroupState:
        return cls(
            (json.loads(key), Contribution(rows, tuple(sums)))
            for key, rows, sums in json.loads(text)
        )
