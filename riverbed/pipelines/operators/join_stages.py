"""An aggregate kept up to date over the inner join of two CDC changelogs: the pure logic of
its three stages (:mod:`riverbed.pipelines.operators.changelog_join` runs them on Spark;
:mod:`riverbed.pipelines.operators.changelog` parses and orders the changes). Nothing here
knows Spark; every state round-trips through a JSON string.

A :class:`JoinSpec` names the parts (for example, per category, the count, units and
revenue of the non-cancelled ``orders ⨝ products``): the left table (orders) is joined on
its column ``join_column`` to the right table's primary key (products: at most one right row
per join key); each (left, right) pair gives measures (integers, exact) or None (left out:
a cancelled order), summed per ``group`` of the right row (the category). Three grouped
operators (in Spark, three ``transformWithStateInPandas`` operators of one query), each fed
its input of one micro-batch at once:

0. :func:`route_left`, grouped by the *left key* (order_id): state = the order's
   :class:`~riverbed.pipelines.operators.changelog.RowState`. It turns the order's changes
   into :class:`LeftRow` s, replace semantics, for the join keys they touch: "order X is now
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

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from riverbed.pipelines.operators.changelog import Change, RowState, SourcePosition
from riverbed.pipelines.operators.json_rows import Json, Row, dumps, json_text, loads

__all__ = [
    "LEFT_STATE",
    "Contribution",
    "GroupContribution",
    "GroupState",
    "JoinKeyState",
    "JoinSpec",
    "LeftRow",
    "left_state",
    "left_state_obj",
    "route_left",
]


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

    join_column: str
    """The left row's column that holds its join key (null: it joins nothing, as in SQL)."""
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

    kept_columns: tuple[str, ...] = field(init=False)
    """The columns of a left row that stage 0 keeps: the join column, then
    ``left_columns``."""

    def __post_init__(self) -> None:
        kept = (self.join_column, *(c for c in self.left_columns if c != self.join_column))
        object.__setattr__(self, "kept_columns", kept)

    def output(self, group: Json, total: Contribution | None) -> Row | None:
        """The output value of a group (None: a tombstone)."""
        if total is None:
            return None
        sums = dict(zip(self.sum_fields, total.sums, strict=True))
        return {self.group_field: group, self.count_field: total.rows, **sums}


@dataclass(frozen=True, slots=True, kw_only=True)
class LeftRow:
    """Stage 0's output: left row ``left_key`` is now ``row`` under ``join_key`` (None: it
    is no longer there)."""

    join_key: Json
    left_key: str
    """The canonical JSON text of the left record's key (:func:`json_text`)."""
    row: Row | None


def route_left(
    state: RowState, changes: Iterable[Change], spec: JoinSpec, *, name: str | None = None
) -> list[LeftRow]:
    """Stage 0: apply one left key's changes (in log order) to its state; the LeftRows
    for the join keys whose row changed (a retraction under the old join key, an upsert
    under the new one; only ``spec.left_columns``). ``name``: the canonical JSON text of
    the changes' key, when the caller has grouped them by it (else each change's key is
    checked to be the same)."""
    old = _routed(state.row, spec)
    check = name is None
    for change in changes:
        if check:
            own = json_text(change.key)
            if name is not None and own != name:
                raise ValueError(f"changes of two keys, {name} and {own}")
            name = own
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
    key = None if row is None else row.get(spec.join_column)
    if row is None or key is None:
        return None
    return key, {name: row.get(name) for name in spec.left_columns}


LEFT_STATE = 2
"""The version of stage 0's state form (:func:`left_state_obj`); version 1 was
:meth:`~riverbed.pipelines.operators.changelog.RowState.as_json`, the whole row."""


def left_state_obj(state: RowState, spec: JoinSpec) -> list[Json]:
    """Stage 0's state of one left key as JSON-able data, compact: ``[2, values, commit_lsn,
    lsn, skipped_delete]``, ``values`` those of ``spec.kept_columns`` (null: no row), the
    position's parts null when it is unknown. Stage 0 needs no other column, and it reads
    and writes the state of every left key a batch touches: an order's whole row made
    ``category_sales``' order states about four times as large."""
    values = None if state.row is None else [state.row.get(c) for c in spec.kept_columns]
    commit, lsn = (None, None) if state.position is None else state.position
    return [LEFT_STATE, values, commit, lsn, state.skipped_delete]


def left_state(obj: Json, spec: JoinSpec) -> RowState:
    """The state :func:`left_state_obj` gave (or a version 1 state, the whole row kept:
    :meth:`~riverbed.pipelines.operators.changelog.RowState.as_json`); None: a new key."""
    if obj is None:
        return RowState()
    if isinstance(obj, dict):
        return RowState.from_obj(obj)
    _, values, commit, lsn, skipped = obj
    return RowState(
        row=None if values is None else dict(zip(spec.kept_columns, values, strict=True)),
        position=None if commit is None else SourcePosition(commit, lsn),
        skipped_delete=skipped,
    )


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
        LeftRows routed here. The contributions that changed (module docstring). The new
        contribution is the old one updated by the left rows that changed, unless the right
        row changed too: then it is summed again over every left row."""
        old = self.contribution(spec)
        right_changed = False
        for change in right:
            right_changed = self.right.apply(change) or right_changed
        right_row = self.right.row
        if right_changed or right_row is None:
            for row in left:
                self._put(row)
            new = self.contribution(spec)
        else:
            rows, sums = (0, [0] * len(spec.sum_fields))
            if old is not None:
                rows, sums = old[1].rows, list(old[1].sums)
            for row in left:
                before = self.left.get(row.left_key)
                if (
                    before is not None
                    and (measures := spec.measures(before, right_row)) is not None
                ):
                    rows -= 1
                    sums = [a - b for a, b in zip(sums, measures, strict=True)]
                self._put(row)
                if (
                    row.row is not None
                    and (measures := spec.measures(row.row, right_row)) is not None
                ):
                    rows += 1
                    sums = [a + b for a, b in zip(sums, measures, strict=True)]
            new = (spec.group(right_row), Contribution(rows, tuple(sums))) if rows else None
        out = []
        if old is not None and (new is None or json_text(new[0]) != json_text(old[0])):
            zero = Contribution(0, (0,) * len(spec.sum_fields))
            out.append(GroupContribution(group=old[0], join_key=join_key, contribution=zero))
        if new is not None and new != old:
            out.append(GroupContribution(group=new[0], join_key=join_key, contribution=new[1]))
        return out

    def _put(self, row: LeftRow) -> None:
        if row.row is None:
            self.left.pop(row.left_key, None)
        else:
            self.left[row.left_key] = row.row

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
        return dumps({"right": self.right.as_json(), "left": self.left})

    @classmethod
    def from_json(cls, text: str) -> JoinKeyState:
        obj = loads(text)
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
        return {loads(key): c for key, c in self._by_join_key.items()}

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
        return dumps([[key, c.rows, list(c.sums)] for key, c in self._by_join_key.items()])

    @classmethod
    def from_json(cls, text: str) -> GroupState:
        return cls((loads(key), Contribution(rows, tuple(sums))) for key, rows, sums in loads(text))
