"""A stream-stream interval join on Spark's stateful streaming: :class:`IntervalJoin`
(``transformWithStateInPandas``, EventTime mode), applied by :func:`interval_join`; the
join logic is :mod:`riverbed.pipelines.operators.intervals`.

**Input.** One DataFrame holding both sides (read in one pass: two filtered branches of a
source would read every record twice), with a watermark declared on the time column
(:func:`~riverbed.pipelines.operators.inputs.with_event_time`, which keeps late rows in the
operator's input), and the columns: the join key (``key_field``), the side (:data:`SIDE`,
:data:`LEFT` or :data:`RIGHT`), the time (``ts_field``, epoch ms), the left row's id
(``left_id_field``) and the fields each side carries (``left_fields``, ``right_fields``).
A row without a key or a time is left out, and so is a row without one of its side's
fields (a search without a query), or a left row without an id.

**Output.** What the caller makes of it, as PatternMatches takes ``result``: ``on_left``
turns each new left row (a duplicate of one held is not new) into output rows, ``on_join``
each joined pair (``first`` when it is the left row's first match); the rows are tuples in
the order of ``output_schema``. With ``combine``, the rows of each call (a bucket's input
in a micro-batch) are handed to it and it returns the rows written: ``search_ctr`` sums
its deltas per (window, query) there, about a third as many rows (BENCHMARKS.md). The
rows are written in the micro-batch's transaction, so each exactly once. Both sides'
rows arrive in any order: a pair is joined in the batch where its second row arrives,
while the first is still held.

**State and expiry.** The operator groups by a hash bucket of the key
(:mod:`riverbed.pipelines.operators.buckets`: a key with a row or two per micro-batch, and a
group per key, made PySpark's fixed cost per group the bulk of the work); each key's
:class:`~riverbed.pipelines.operators.intervals.IntervalJoinState` is kept in the map state
``joins`` until the watermark passes its expiry (no on-time row can join it after that),
handled at most ``expiry_resolution_ms`` of event time later. The state store is Spark's
(RocksDB, checkpointed): after a crash the batch is replayed from the last committed state,
with the same input and watermark, so it emits the same rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from riverbed.pipelines.operators.base import KeyedOperator, OutputRows, by_bucket
from riverbed.pipelines.operators.intervals import (
    IntervalJoinState,
    Joined,
    JoinInterval,
    LeftRow,
    RightRow,
)

__all__ = [
    "EXPIRY_RESOLUTION_MS",
    "LEFT",
    "RIGHT",
    "SIDE",
    "Combine",
    "IntervalJoin",
    "OnJoin",
    "OnLeft",
    "interval_join",
]

SIDE = "interval_join_side"
"""The input column that says a row's side. Not a ``_...`` name: the pandas frames of
``transformWithStateInPandas`` rename those to ``_1``, ``_2``, ..."""
LEFT, RIGHT = "left", "right"
"""The values of :data:`SIDE`."""
EXPIRY_RESOLUTION_MS = 60_000
"""By default, a key's state is expired at most this much event time after its own expiry."""

OnLeft = Callable[[LeftRow], Iterable[tuple[Any, ...]]]
"""The output rows of a new left row."""
OnJoin = Callable[[Joined], Iterable[tuple[Any, ...]]]
"""The output rows of a joined pair."""
Combine = Callable[[list[tuple[Any, ...]]], list[tuple[Any, ...]]]
"""The output rows of a call (a bucket's input in a micro-batch), combined before they are
written: e.g. deltas summed per key, so that fewer rows cross to the JVM and the next stage."""


class IntervalJoin(KeyedOperator):
    """Rows of two sides joined per key when ``condition`` holds for their times (module
    docstring). Must be picklable, ``on_left`` and ``on_join`` too: Spark sends the
    processor to the executors."""

    def __init__(
        self,
        *,
        condition: JoinInterval,
        key_field: str,
        left_id_field: str,
        left_fields: Sequence[str],
        right_fields: Sequence[str] = (),
        ts_field: str = "ts",
        on_left: OnLeft,
        on_join: OnJoin,
        output_schema: StructType,
        combine: Combine | None = None,
        expiry_resolution_ms: int = EXPIRY_RESOLUTION_MS,
    ) -> None:
        super().__init__(
            output_schema=output_schema, state_name="joins", resolution_ms=expiry_resolution_ms
        )
        self.condition = condition
        self.key_field, self.left_id_field, self.ts_field = key_field, left_id_field, ts_field
        self.left_fields, self.right_fields = list(left_fields), list(right_fields)
        self.on_left, self.on_join, self.combine = on_left, on_join, combine

    def on_input(self, key: Any, batch: pd.DataFrame, watermark_ms: int) -> OutputRows:
        out: OutputRows = []
        by_key = self._by_key(batch)
        self.states.expect(len(by_key))
        on_left, on_join, condition = self.on_left, self.on_join, self.condition
        for name, (lefts, rights) in by_key.items():
            stored = self.states.get(name)
            state = IntervalJoinState() if stored is None else IntervalJoinState.from_obj(stored)
            new, joined = state.add(condition, lefts=lefts, rights=rights)
            for left in new:
                out += on_left(left)
            for pair in joined:
                out += on_join(pair)
            state.expire(condition, watermark_ms)
            self._save(name, state)
        return out if self.combine is None or not out else self.combine(out)

    def on_due(self, name: str, state: Any, watermark_ms: int) -> OutputRows:
        joins = IntervalJoinState.from_obj(state)
        joins.expire(self.condition, watermark_ms)
        self._save(name, joins)
        return []  # an expired left row was reported when it came

    def _save(self, name: str, state: IntervalJoinState) -> None:
        if state.is_empty():
            self.states.remove(name)
        else:
            self.states.put(name, state.to_obj(), due_ms=state.next_expiry_ms(self.condition))

    def _by_key(self, batch: pd.DataFrame) -> dict[str, tuple[list[LeftRow], list[RightRow]]]:
        """The batch's valid rows (module docstring) by key, in arrival order."""
        batch = batch.dropna(subset=[self.key_field, self.ts_field])
        is_left = batch[SIDE] == LEFT
        whole_left = batch[[self.left_id_field, *self.left_fields]].notna().all(axis=1)
        if self.right_fields:
            batch = batch[is_left & whole_left | ~is_left & batch[self.right_fields].notna().all(1)]
        else:
            batch = batch[is_left & whole_left | ~is_left]
        left_names, right_names = self.left_fields, self.right_fields
        by_key: dict[str, tuple[list[LeftRow], list[RightRow]]] = {}
        for key, side, ts, left_id, own, other in zip(
            map(str, batch[self.key_field].tolist()),
            batch[SIDE].tolist(),
            batch[self.ts_field].astype("int64").tolist(),
            batch[self.left_id_field].tolist(),
            _tuples(batch, left_names),
            _tuples(batch, right_names),
            strict=True,
        ):
            both = by_key.get(key)
            if both is None:
                both = by_key[key] = ([], [])
            if side == LEFT:
                fields = dict(zip(left_names, own, strict=True))
                both[0].append(LeftRow(id=str(left_id), ts=ts, fields=fields))
            else:
                both[1].append(RightRow(ts=ts, fields=dict(zip(right_names, other, strict=True))))
        return by_key


def _tuples(batch: pd.DataFrame, columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """The values of ``columns`` in each row of ``batch``."""
    if not columns:
        return [()] * len(batch)
    return list(zip(*(batch[c].tolist() for c in columns), strict=True))


def interval_join(rows: DataFrame, processor: IntervalJoin) -> DataFrame:
    """Apply :class:`IntervalJoin` to ``rows`` (module docstring: both sides, with a
    watermark), grouped by a bucket of ``processor.key_field``; the rows of
    ``processor.output_schema``."""
    return by_bucket(rows, processor, processor.key_field, time_mode="EventTime")
