"""An aggregate kept up to date over the inner join of two CDC changelogs, on Spark's stateful
streaming: the three stages of :mod:`riverbed.pipelines.operators.join_stages` as three
chained ``transformWithStateInPandas`` operators of one query (``timeMode="None"``, append
mode).

:func:`join_aggregate` wires them; its inputs are two
:func:`riverbed.pipelines.operators.inputs.changes` DataFrames (the left table's, e.g.
orders, and the right table's, e.g. products), its output the rows for the riverbed sink
(``topic``, ``key``, ``value``; ``value`` null for a tombstone):

0. :class:`RouteLeftRows`, keyed by the left table's key column (``order_id``): applies the
   batch's changes of the left row, sorted by ``(partition, offset)``, and emits
   :class:`~riverbed.pipelines.operators.join_stages.LeftRow` s (``join_key_json``,
   ``left_key``, ``left_row``, the row's columns as JSON or null for a retraction).
1. :class:`JoinKeyStage`, keyed by the join key (``product_id``), over the union of the
   right table's changes and stage 0's rows: emits
   :class:`~riverbed.pipelines.operators.join_stages.GroupContribution` s (``group_json``,
   ``join_key_json``, ``rows``, ``sums`` as a JSON array).
2. :class:`GroupStage`, grouped by ``group_json`` (the category): the group's total, written
   as the group's output row, or a tombstone once nothing is left in it.

**Routing.** Stage 1 groups the right table's changes by the join-key column of their record
key (``get_json_object(key, '$.product_id')``, as
:func:`~riverbed.pipelines.operators.inputs.changes` gives it) and stage 0's rows by the
same function of their join key (:func:`_routing`), so both sides of a join key meet in one
bucket whatever its JSON type. Within a bucket, states are told apart by the canonical JSON
text of their key (:func:`~riverbed.pipelines.operators.json_rows.json_text`): ``5`` and ``"5"``
route to one group but are different keys, as they are in SQL. Rows whose grouping column
is null are left out before grouping: truncates, and orders without a product.

**State** (RocksDB, checkpointed with the query): stages 0 and 1 group by a bucket of their
key column (:mod:`riverbed.pipelines.operators.buckets`: an order or a product has a change
or two per micro-batch, and a group per key made PySpark's fixed cost per group the bulk of
the work) and keep a JSON string per key in a map state of the bucket: stage 0 (``left``),
the RowState per left key, of the columns it routes only
(:func:`~riverbed.pipelines.operators.join_stages.left_state_obj`); stage 1 (``join_keys``),
the JoinKeyState per join key. Stage 2 keeps one ValueState per group (``group``), the
GroupState (cleared when the group is empty). Stages 0 and 1 keep the state of a deleted
row (its position, a few bytes) so that replayed changes stay ignored. No timers, no
watermark: nothing expires, and no input is ever late (a change applies whenever it
arrives, in log order per key).

**Exactly once.** Each stage emits the net effect of its batch: at most one row per (join
key, left key) from stage 0, per (group, join key) from stage 1 and per group from stage 2,
so the next stage may see them in any order. Spark replays a failed batch from the
checkpointed state, so a restart after a kill -9 changes no final value.

**Left out:** records that :func:`~riverbed.pipelines.operators.changelog.parse_change`
rejects, and truncates (``op: t``, keyed ``{}``: their group key is null). A truncate would
have to reach every key's state; a truncated table's rows stay in the result until their
next change.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle
from pyspark.sql.types import LongType, StringType, StructField, StructType

from riverbed.pipelines.operators.base import (
    OUTPUT_SCHEMA,
    KeyedOperator,
    Operator,
    OutputRows,
    by_bucket,
)
from riverbed.pipelines.operators.changelog import Change, MalformedChange, RowState, parse_change
from riverbed.pipelines.operators.join_stages import (
    Contribution,
    GroupContribution,
    GroupState,
    JoinKeyState,
    JoinSpec,
    LeftRow,
    left_state,
    left_state_obj,
    route_left,
)
from riverbed.pipelines.operators.json_rows import (
    Json,
    dumps,
    json_text,
    loads,
    plain,
    read_state,
    state_text,
)

__all__ = [
    "CONTRIBUTIONS_SCHEMA",
    "LEFT_ROWS_SCHEMA",
    "GroupStage",
    "JoinKeyStage",
    "RouteLeftRows",
    "join_aggregate",
]

JOIN_KEY = "join_key"
"""Stage 1's grouping column: the join key as ``get_json_object`` gives it (:func:`_routing`)."""

LEFT_ROWS_SCHEMA = StructType(
    [
        StructField("join_key_json", StringType(), False),
        StructField("left_key", StringType(), False),
        StructField("left_row", StringType(), True),
    ]
)
"""Stage 0's output: a LeftRow (``left_row`` null: the left row left this join key)."""

CONTRIBUTIONS_SCHEMA = StructType(
    [
        StructField("group_json", StringType(), False),
        StructField("join_key_json", StringType(), False),
        StructField("rows", LongType(), False),
        StructField("sums", StringType(), False),
    ]
)
"""Stage 1's output: a GroupContribution (``sums`` a JSON array of integers)."""


def _text(value: Any) -> str | None:
    """A string cell of a pandas batch (nulls arrive as None or NaN)."""
    return value if isinstance(value, str) else None


def _changes(batch: pd.DataFrame) -> list[Change]:
    """The batch's change records of one group, parsed, in log order; malformed ones left
    out. Spark does not keep the order of a group's rows: sort by (partition, offset)."""
    batch = batch.sort_values(["partition", "offset"], kind="stable")
    out = []
    for key, value in zip(batch["key"].tolist(), batch["value"].tolist(), strict=True):
        key_text, value_text = _text(key), _text(value)
        if key_text is None:
            continue
        try:
            out.append(parse_change(key_text, value_text))
        except MalformedChange:
            continue
    return out


def _by_key(changes: list[Change]) -> dict[str, list[Change]]:
    """Changes by the canonical text of their record key, each list in log order."""
    grouped: dict[str, list[Change]] = {}
    for change in changes:
        grouped.setdefault(json_text(change.key), []).append(change)
    return grouped


class RouteLeftRows(KeyedOperator):
    """Stage 0, grouped by a bucket of the left table's key column: the left rows' changes
    of the batch, applied in log order
    (:func:`~riverbed.pipelines.operators.join_stages.route_left`), as the LeftRows of the
    join keys they touch (:data:`LEFT_ROWS_SCHEMA`). State: a RowState per left key. Runs
    once per bucket with input in each micro-batch, on an executor."""

    def __init__(self, spec: JoinSpec) -> None:
        super().__init__(output_schema=LEFT_ROWS_SCHEMA, state_name="left")
        self.spec = spec

    def on_input(self, key: Any, batch: pd.DataFrame, watermark_ms: int) -> OutputRows:
        routed: list[LeftRow] = []
        by_key = _by_key(_changes(batch))
        self.states.expect(len(by_key))
        for name, own in by_key.items():
            state = left_state(self.states.get(name), self.spec)
            routed.extend(route_left(state, own, self.spec, name=name))
            self.states.put(name, left_state_obj(state, self.spec))
        return [
            (json_text(r.join_key), r.left_key, None if r.row is None else state_text(r.row))
            for r in routed
        ]


class JoinKeyStage(KeyedOperator):
    """Stage 1, grouped by a bucket of :data:`JOIN_KEY`, over the union of the right table's
    change records (``key``, ``value``, ``partition``, ``offset``) and stage 0's rows
    (``left_key`` set): :class:`~riverbed.pipelines.operators.join_stages.JoinKeyState` per
    join key, emitting the contributions that changed (:data:`CONTRIBUTIONS_SCHEMA`). Runs
    once per bucket with input in each micro-batch."""

    def __init__(self, spec: JoinSpec) -> None:
        super().__init__(output_schema=CONTRIBUTIONS_SCHEMA, state_name="join_keys")
        self.spec = spec

    def on_input(self, key: Any, batch: pd.DataFrame, watermark_ms: int) -> OutputRows:
        is_left = batch["left_key"].map(lambda v: isinstance(v, str))
        right: dict[str, list[Change]] = {}
        for change in _changes(batch[~is_left]):
            join_key = self.spec.right_key(change.key)
            if join_key is not None:
                right.setdefault(json_text(join_key), []).append(change)
        left: dict[str, list[LeftRow]] = {}
        for join_key_json, left_key, row in zip(
            *(batch.loc[is_left, c].tolist() for c in ("join_key_json", "left_key", "left_row")),
            strict=True,
        ):
            row_text = _text(row)
            left.setdefault(join_key_json, []).append(
                LeftRow(
                    join_key=loads(join_key_json),
                    left_key=left_key,
                    row=None if row_text is None else read_state(row_text),
                )
            )
        out: OutputRows = []
        names = sorted(right.keys() | left.keys())
        self.states.expect(len(names))
        for name in names:
            state = _join_key_state(self.states.get(name))
            for c in state.apply(
                loads(name), self.spec, right=right.get(name, ()), left=left.get(name, ())
            ):
                out.append(_contribution_row(c))
            self.states.put(name, {"right": state.right.as_json(), "left": state.left})
        return out


def _join_key_state(obj: Json) -> JoinKeyState:
    if obj is None:
        return JoinKeyState()
    return JoinKeyState(right=RowState.from_obj(obj["right"]), left=obj["left"])


def _contribution_row(c: GroupContribution) -> tuple[str, str, int, str]:
    return (
        json_text(c.group),
        json_text(c.join_key),
        c.contribution.rows,
        dumps(list(c.contribution.sums)),
    )


class GroupStage(Operator):
    """Stage 2, grouped by ``group_json``: adds the contributions of the join keys
    (:class:`~riverbed.pipelines.operators.join_stages.GroupState`) and writes the group's
    row to ``topic``, keyed ``{group_field: group}``, when its total changed in the batch; a
    tombstone when the group is left empty (its state is then cleared). Runs once per group
    with input in each micro-batch."""

    def __init__(self, spec: JoinSpec, *, topic: str) -> None:
        super().__init__(output_schema=OUTPUT_SCHEMA)
        self.spec, self.topic = spec, topic

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.state = handle.getValueState("group", "json STRING")

    def on_input(self, key: Any, batch: pd.DataFrame, watermark_ms: int) -> OutputRows:
        stored = self.state.get() if self.state.exists() else None
        group_state = GroupState() if stored is None else GroupState.from_json(str(stored[0]))
        group = loads(plain(key[0]))
        contributions = [
            GroupContribution(
                group=group,
                join_key=loads(join_key_json),
                contribution=Contribution(int(n), tuple(loads(sums))),
            )
            for join_key_json, n, sums in zip(
                batch["join_key_json"].tolist(),
                batch["rows"].tolist(),
                batch["sums"].tolist(),
                strict=True,
            )
        ]
        changed = group_state.apply(contributions)
        if group_state.total is None:
            self.state.clear()
        else:
            self.state.update((group_state.to_json(),))
        if not changed:
            return []
        value = self.spec.output(group, group_state.total)
        return [
            (
                self.topic,
                dumps({self.spec.group_field: group}),
                None if value is None else dumps(value),
            )
        ]


def _routing(json_column: Column) -> Column:
    """The join key (a column of its JSON text) as ``get_json_object`` reads it from a
    record key: the same function of the value as the right side's grouping column."""
    return F.get_json_object(F.concat(F.lit('{"k":'), json_column, F.lit("}")), "$.k")


def join_aggregate(
    left: DataFrame,
    right: DataFrame,
    spec: JoinSpec,
    *,
    left_key_column: str,
    right_key_column: str,
    topic: str,
) -> DataFrame:
    """The aggregate of ``spec`` over ``left ⨝ right`` kept up to date, as sink rows for
    ``topic`` (module docstring). ``left`` and ``right`` are
    :func:`~riverbed.pipelines.operators.inputs.changes` DataFrames with the key columns
    ``left_key_column`` and ``right_key_column`` (the column ``spec.right_key`` reads)."""
    left_rows = by_bucket(
        left.where(F.col(left_key_column).isNotNull()),
        RouteLeftRows(spec),
        left_key_column,
        time_mode="None",
    )
    stage1_input = right.select(
        F.col(right_key_column).alias(JOIN_KEY), "key", "value", "partition", "offset"
    ).unionByName(
        left_rows.withColumn(JOIN_KEY, _routing(F.col("join_key_json"))),
        allowMissingColumns=True,
    )
    contributions = by_bucket(
        stage1_input.where(F.col(JOIN_KEY).isNotNull()),
        JoinKeyStage(spec),
        JOIN_KEY,
        time_mode="None",
    )
    groups = GroupStage(spec, topic=topic)
    return contributions.groupBy("group_json").transformWithStateInPandas(
        groups, groups.output_schema, "append", "None"
    )
