"""An as-of (temporal) join on Spark's stateful streaming: each event of a stream joined
with the row its key had, at the event's time, in a table known by its CDC changelog, with
corrections when a change arrives late (:class:`AsOfJoin`, applied by :func:`as_of_join`).

**What it computes.** An event (a click) is joined with its table key's (its user's) row as
of the event's time ``ts``: the latest change of that key with ``source.ts_ms <= ts`` (of
two changes at the same time, the later position), its ``columns`` (a user's profile);
nulls when that change is a delete, or when there is none (a user never seen, or not yet
created then). The output is a changelog keyed by the event's id: an event is emitted as
soon as it arrives, joined with the changes seen so far, and emitted again each time a
change that arrives later (a *late* change: the capture lags behind the clickstream) gives
it another row. The last value per id is the answer over every change.

**Input.** The events and the table's change records in one DataFrame, read in one pass
and grouped by the table key (:func:`as_of_join` builds it), so one group holds a key's
events and changes. Changes are parsed here
(:func:`riverbed.pipelines.changelog.parse_change`; malformed ones are left out).
Tombstones add nothing (the delete before them made the deletion) and are left out before
the shuffle; truncates (key ``{}``, no table key) are not supported and ignored, as
they would have to reach every key's state. Events without an id or a time are left out;
events without a table key are emitted with nulls and not kept.

**State, per table key** (Spark's RocksDB state store, checkpointed with the query):

- ``table``: the key's :class:`~riverbed.pipelines.joins.VersionedRow` (its versions by
  change time, as JSON), ``history_from`` (after a prune that dropped versions: the time of
  the oldest version kept, below which lookups are no longer exact) and ``prune_at`` (the
  key's one timer);
- ``events``: id -> (ts, event JSON), the events emitted that a late change may correct.

**Retention, and what is late.** Event time (EventTime mode) is the events' ``ts`` and the
changes' ``source.ts_ms``; the watermark follows both. The *horizon* is the watermark minus
``retention_ms``. Everything is kept for corrections until the horizon passes its time:
then, at the key's timer (the earliest time something becomes prunable), the events below
the horizon are forgotten (their answer is final) and so are the versions no lookup at or
after it needs (:meth:`~riverbed.pipelines.joins.VersionedRow.prune`: every version before
the latest one at or below the horizon). A key's state shrinks to its current row (or its
deletion, which hides older late changes) once nothing is left to correct. What arrives
below the horizon is not silently wrong:

- an event: emitted as usual, joined with the history kept, but not kept for corrections,
  and also written to ``late_topic`` (keyed by its id: the event and the ``reason``). The
  answer is exact (as of the changes seen) when ``ts`` is at or after ``history_from``;
  otherwise the versions it needs were discarded and the reason says it may be wrong;
- a change: it corrects the events still kept as usual, but the events below the horizon
  it applies to may have been forgotten already; it is written to ``late_topic`` (keyed by
  the table key and the change's position) with the reason.

**Within a micro-batch**, a key's changes are applied before its events are joined, so an
event is emitted once per batch, with every change of the batch and before. An event is
emitted again only when its row changes (so never twice in a row with the same value,
unless the event itself arrives twice).

**Crash behaviour.** The state and the output rows of a micro-batch are committed together
(the state store version and the sink's transaction of the batch); after a crash Spark runs
the batch again from the previous state with the same input and watermark, so it emits the
same rows. Cost: a batch that brings changes of a key reads the key's kept events, so
``O(events of the key within the retention)``; other batches only write.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import StructType

from riverbed.pipelines.changelog import Change, MalformedChange, Row, parse_change
from riverbed.pipelines.joins import Version, VersionedRow
from riverbed.pipelines.operators import (
    NO_OUTPUT,
    OUTPUT_SCHEMA,
    dumps,
    output_rows,
    with_event_time,
)

__all__ = ["AsOfJoin", "as_of_join"]

# The columns of the operator's input (as_of_join), besides the table key. Not "_..."
# names: the pandas frames of transformWithStateInPandas rename those to _1, _2, ...
EVENT_ID, EVENT_TS, EVENT, CHANGE_KEY, CHANGE_VALUE = (
    "as_of_event_id",
    "as_of_event_ts",
    "as_of_event",
    "as_of_change_key",
    "as_of_change_value",
)
_OutRow = tuple[str, str, str | None]


@dataclass(slots=True, kw_only=True)
class _TableState:
    versions: VersionedRow
    history_from: int | None
    prune_at: int | None


class AsOfJoin(StatefulProcessor):
    """The as-of join of events with a changelog table (module docstring). Spark calls
    ``init`` once per task and partition, ``handleInputRows`` once per key and micro-batch
    with input, and ``handleExpiredTimer`` when the watermark passes a key's timer; the
    object is pickled to the executors."""

    def __init__(
        self,
        *,
        id_field: str,
        ts_field: str,
        columns: Sequence[str],
        topic: str,
        late_topic: str,
        retention_ms: int,
    ) -> None:
        if retention_ms <= 0:
            raise ValueError(f"retention_ms must be positive, not {retention_ms}")
        self.id_field, self.ts_field = id_field, ts_field
        self.columns = list(columns)
        self.topic, self.late_topic = topic, late_topic
        self.retention_ms = retention_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.table = handle.getValueState(
            "table", "versions STRING, history_from LONG, prune_at LONG"
        )
        self.events = handle.getMapState("events", "id STRING", "ts LONG, event STRING")

    # -- Spark's callbacks ---------------------------------------------------------------

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        batch = pd.concat(list(rows), ignore_index=True)
        events = _events(batch)
        if _plain(key[0]) is None:  # no table key: nothing to join with, nothing to correct
            yield output_rows([self._joined(event, None) for _, _, event in events])
            return
        watermark = timerValues.getCurrentWatermarkInMs()
        horizon = watermark - self.retention_ms
        state = self._load()
        out: list[_OutRow] = []
        changes = _changes(batch, self.columns)
        if changes:
            fresh = {event_id for event_id, _, _ in events}
            out += self._apply(state, changes, fresh, watermark, horizon)
        earliest: int | None = None
        for event_id, ts, event in events:
            out.append(self._joined(event, state.versions.as_of(ts)))
            if ts < horizon:
                out.append(self._late_event(event, ts, state, watermark))
            else:
                self.events.updateValue((event_id,), (ts, dumps(event)))
                earliest = ts if earliest is None else min(earliest, ts)
        self._schedule(state, earliest, watermark)
        self._save(state)
        yield output_rows(out)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        """Forget what the horizon has passed, and set the timer for what comes next."""
        watermark = timerValues.getCurrentWatermarkInMs()
        horizon = watermark - self.retention_ms
        state = self._load()
        kept = [(str(k[0]), int(v[0])) for k, v in self.events.iterator()]
        earliest: int | None = None
        for event_id, ts in kept:
            if ts < horizon:
                self.events.removeKey((event_id,))
            else:
                earliest = ts if earliest is None else min(earliest, ts)
        before = len(state.versions)
        state.versions.prune(horizon)
        if len(state.versions) < before:
            state.history_from = state.versions.versions[0].ts_ms
        state.prune_at = None  # this timer has fired
        self._schedule(state, earliest, watermark)
        self._save(state)
        yield NO_OUTPUT

    def close(self) -> None:
        pass

    # -- the join ------------------------------------------------------------------------

    def _apply(
        self,
        state: _TableState,
        changes: list[tuple[Change, Version]],
        fresh: set[str],
        watermark: int,
        horizon: int,
    ) -> list[_OutRow]:
        """Add a batch's versions; the corrected events and the late changes' reports."""
        kept = [
            (str(k[0]), int(v[0]), str(v[1]))
            for k, v in self.events.iterator()
            if str(k[0]) not in fresh  # joined again below anyway
        ]
        lookups = [(event_id, ts) for event_id, ts, _ in kept]
        before = VersionedRow(state.versions.versions)
        touched: set[str] = set()
        out: list[_OutRow] = []
        for change, version in changes:
            touched.update(state.versions.changed_by(version, lookups))
            if state.versions.add(version) and version.ts_ms < horizon:
                out.append(self._late_change(change, version, watermark, horizon))
        for event_id, ts, text in kept:
            if event_id in touched:
                row = state.versions.as_of(ts)
                if row != before.as_of(ts):
                    out.append(self._joined(json.loads(text), row))
        return out

    def _joined(self, event: Row, row: Row | None) -> _OutRow:
        profile = {name: None if row is None else row.get(name) for name in self.columns}
        return self.topic, dumps({self.id_field: event[self.id_field]}), dumps(event | profile)

    def _late_event(self, event: Row, ts: int, state: _TableState, watermark: int) -> _OutRow:
        reason = (
            f"{self.ts_field} {ts} is more than {self.retention_ms} ms behind the watermark "
            f"{watermark}: joined with the history kept, not corrected by later changes"
        )
        if state.history_from is not None and ts < state.history_from:
            reason += (
                f"; the history before {state.history_from} was discarded, so the row "
                "joined may be wrong"
            )
        key = dumps({self.id_field: event[self.id_field]})
        return self.late_topic, key, dumps(event | {"reason": reason})

    def _late_change(
        self, change: Change, version: Version, watermark: int, horizon: int
    ) -> _OutRow:
        position = {"commit_lsn": version.position.commit_lsn, "lsn": version.position.lsn}
        reason = (
            f"change at {version.ts_ms} is more than {self.retention_ms} ms behind the "
            f"watermark {watermark}: the events before {horizon} it applies to may be no "
            "longer kept, and keep their earlier row"
        )
        value = change.key | {"source_ts_ms": version.ts_ms, "op": change.op.value}
        return (
            self.late_topic,
            dumps(change.key | position),
            dumps(value | position | {"reason": reason}),
        )

    # -- state ---------------------------------------------------------------------------

    def _load(self) -> _TableState:
        stored = self.table.get()
        if stored is None:
            return _TableState(versions=VersionedRow(), history_from=None, prune_at=None)
        versions, history_from, prune_at = stored
        return _TableState(
            versions=VersionedRow.from_json(versions),
            history_from=_optional_int(history_from),
            prune_at=_optional_int(prune_at),
        )

    def _save(self, state: _TableState) -> None:
        self.table.update((state.versions.to_json(), state.history_from, state.prune_at))

    def _schedule(self, state: _TableState, earliest_event: int | None, watermark: int) -> None:
        """Keep the key's one timer at the earliest time the horizon passes something: an
        event kept, or the second version (then the first is no longer needed); not
        before the next watermark (a late change can make a version prunable already)."""
        times = [] if earliest_event is None else [earliest_event]
        if len(state.versions) > 1:
            times.append(state.versions.versions[1].ts_ms)
        if not times:
            return
        due = max(min(times) + self.retention_ms + 1, watermark + 1)  # horizon past it
        if state.prune_at is not None and state.prune_at <= due:
            return
        if state.prune_at is not None:
            self.handle.deleteTimer(state.prune_at)
        self.handle.registerTimer(due)
        state.prune_at = due


def _events(batch: pd.DataFrame) -> list[tuple[str, int, Row]]:
    """The batch's events with an id and a time, (id, ts, event), the last of each id."""
    rows = batch[batch[EVENT].notna() & batch[EVENT_ID].notna() & batch[EVENT_TS].notna()]
    by_id: dict[str, tuple[str, int, Row]] = {}
    for event_id, ts, text in zip(rows[EVENT_ID], rows[EVENT_TS], rows[EVENT], strict=True):
        by_id[str(event_id)] = (str(event_id), int(ts), json.loads(text))
    return list(by_id.values())


def _changes(batch: pd.DataFrame, columns: Sequence[str]) -> list[tuple[Change, Version]]:
    """The batch's well-formed changes that make a version (tombstones and truncates do not)."""
    rows = batch[batch[CHANGE_VALUE].notna()]
    out = []
    for key, value in zip(rows[CHANGE_KEY], rows[CHANGE_VALUE], strict=True):
        try:
            change = parse_change(None if key is None else str(key).encode(), str(value).encode())
        except MalformedChange:
            continue  # not a change of the contract: left out, as other operators do
        version = Version.of(change, columns)
        if version is not None:
            out.append((change, version))
    return out


def _optional_int(value: Any) -> int | None:
    return None if value is None or pd.isna(value) else int(value)


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value JSON can encode."""
    return value.item() if isinstance(value, np.generic) else value


def as_of_join(
    source: DataFrame,
    processor: AsOfJoin,
    *,
    events_topic: str,
    event_schema: StructType,
    changes_topic: str,
    key_column: str,
    delay: str,
) -> DataFrame:
    """Apply :class:`AsOfJoin` to the events of ``events_topic`` (JSON objects of
    ``event_schema``, which has the processor's id and time fields and ``key_column``) and
    the change records of ``changes_topic`` (keyed by the JSON of the table's primary key,
    ``key_column``), both in ``source`` (the riverbed source's Kafka schema), with a
    watermark ``delay`` behind the latest event time of both.

    One pass over ``source``: a union of two selections of it (the topics' events as
    :func:`~riverbed.pipelines.inputs.json_events` parses them, the changes as
    :func:`~riverbed.pipelines.inputs.changes` does) would scan every micro-batch twice.
    The JSON is parsed once, in a projection (a filter on the parsed fields would be pushed
    below the parse and parse again): invalid events are left out by the processor."""
    is_event = F.col("topic") == F.lit(events_topic)
    records = source.where(
        is_event | ((F.col("topic") == F.lit(changes_topic)) & F.col("value").isNotNull())
    )  # tombstones add nothing
    text = F.col("value").cast("string")
    key = F.col("key").cast("string")
    parsed = records.select(
        is_event.alias("is_event"),
        F.when(is_event, F.from_json(text, event_schema)).alias("e"),
        F.when(~is_event, key).alias(CHANGE_KEY),
        F.when(~is_event, text).alias(CHANGE_VALUE),
    )
    event = F.col("e")
    change_time = F.get_json_object(F.col(CHANGE_VALUE), "$.source.ts_ms").cast("long")
    rows = parsed.select(
        F.when(F.col("is_event"), event[key_column].cast("string"))
        .otherwise(F.get_json_object(F.col(CHANGE_KEY), f"$.{key_column}"))
        .alias(key_column),
        event[processor.id_field].cast("string").alias(EVENT_ID),
        event[processor.ts_field].cast("long").alias(EVENT_TS),
        F.when(F.col("is_event"), F.to_json(event, {"ignoreNullFields": "false"})).alias(EVENT),
        F.col(CHANGE_KEY),
        F.col(CHANGE_VALUE),
        F.coalesce(event[processor.ts_field].cast("long"), change_time).alias("as_of_time"),
    )
    timed = with_event_time(rows, delay, "as_of_time").drop("as_of_time")
    return timed.groupBy(key_column).transformWithStateInPandas(
        processor, OUTPUT_SCHEMA, "append", "EventTime"
    )
