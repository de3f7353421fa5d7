"""An as-of (temporal) join on Spark's stateful streaming: each event of a stream joined
with the row its key had, at the event's time, in a table known by its CDC changelog, with
corrections when a change arrives late (:class:`AsOfJoin`, applied by :func:`as_of_join`).

**What it computes.** An event (a click) is joined with its table key's (its user's) row as
of the event's time ``ts``: the latest change of that key, in changelog order (snapshot
rows first, then ``(source.commitLsn, source.lsn)``), with ``source.ts_ms <= ts``, a
snapshot row counting as valid from the beginning of time (it says what the row was at the
snapshot's consistent point, not when it was last changed); its ``columns`` (a user's
profile); nulls when that change is a delete, or when there is none (a user never seen, or
not yet created then). Commit times need not grow in changelog order: the order decides
(:mod:`~riverbed.pipelines.operators.versioned_row`). The output is a changelog keyed by
the event's id: an event is emitted as soon as it arrives, joined with the changes seen so
far, and emitted again each time a change that arrives later (a *late* change: the capture
lags behind the clickstream) gives it another row. The last value per id is the answer
over every change.

**Input.** The events and the table's change records in one DataFrame, read in one pass
and grouped by the table key (:func:`as_of_join` builds it), so one group holds a key's
events and changes. Changes are parsed here
(:func:`riverbed.pipelines.operators.changelog.parse_change`; malformed ones are left out).
Tombstones add nothing (the delete before them made the deletion) and are left out before
the shuffle; truncates (key ``{}``, no table key) are not supported and ignored, as
they would have to reach every key's state. Events without an id or a time are left out;
events without a table key are emitted with nulls and not kept.

**State, per table key** (Spark's RocksDB state store, checkpointed with the query), kept by
:class:`riverbed.pipelines.operators.buckets.KeyedStates` (map state ``keys``): the operator
groups by a hash bucket of the table key (one group per user made PySpark's fixed cost per
group the bulk of the work), and a key's state is one JSON object in a slot of its bucket:

- ``v``: the layout, 3 (layout 2 kept the key's events in it: they are moved to the log
  below when the key is next read; layout 1 ordered versions by change time and had no
  snapshot flag: a checkpoint written with it needs a fresh start);
- ``versions``: the key's :class:`~riverbed.pipelines.operators.versioned_row.VersionedRow`
  (its versions in changelog order, each ``[ts_ms, commit_lsn, lsn, snapshot, row]``) and
  ``history_from`` (after a prune that dropped versions: the time of the first version
  kept, below which lookups are no longer exact; null if that is a snapshot row).

**The events kept for corrections, per bucket** (map state ``events``, :class:`_EventLog`):
a log of entries, one per call that kept events, each the JSON object ``{table key: [[id,
ts, event], ...]}``, and an index entry listing each entry with its latest ``ts``. An event
changes nothing in its key's state, so a micro-batch writes the states of the keys that
changed and one entry per bucket, not the state of every key with an event (the events
were most of the state: ``enriched_clicks`` rewrote about 70 MiB a batch). A change reads
only the entries whose latest event is at or after its time; an event that arrives twice
is corrected once, as its last copy.

**Retention, and what is late.** Event time (EventTime mode) is the events' ``ts`` and the
changes' ``source.ts_ms``; the watermark follows both. The *horizon* is the watermark minus
``retention_ms``. Everything is kept for corrections until the horizon passes its time: an
event below the horizon is no longer corrected (its answer is final), and a log entry is
dropped once the horizon has passed all its events (at the bucket's timer, rounded up to
:data:`PRUNE_RESOLUTION_MS`, or at the bucket's next input after that); at the key's timer
(the earliest time a version becomes prunable, rounded up likewise) the versions no lookup
at or after the horizon needs are dropped
(:meth:`~riverbed.pipelines.operators.versioned_row.VersionedRow.prune`: every version
before the latest one, in changelog order, valid at the horizon). A key's state shrinks to
its current row (or its deletion, which hides older late changes). What arrives below the
horizon is not silently wrong:

- an event: emitted as usual, joined with the history kept, but not kept for corrections,
  and also written to ``late_topic`` (keyed by its id: the event and the ``reason``). The
  answer is exact (as of the changes seen) when ``ts`` is at or after ``history_from``;
  otherwise the versions it needs were discarded and the reason says it may be wrong;
- a change (its ``source.ts_ms`` below the horizon; for a snapshot row, its read time): it
  corrects the events still kept as usual, but the events below the horizon it applies to
  may have been forgotten already; it is written to ``late_topic`` (keyed by the table key
  and the change's position) with the reason. A snapshot row applies to earlier events
  too, but is reported only when read below the horizon: it is the first record of its
  key, and the events of the key forgotten before it arrives (only if the events ran more
  than ``retention_ms`` ahead of the capture's snapshot) keep the nulls they were joined
  with, unreported.

**Within a micro-batch**, a key's changes are applied before its events are joined, so an
event is emitted once per batch, with every change of the batch and before. An event is
emitted again only when its row changes (so never twice in a row with the same value,
unless the event itself arrives twice).

**Crash behaviour.** The state and the output rows of a micro-batch are committed together
(the state store version and the sink's transaction of the batch); after a crash Spark runs
the batch again from the previous state with the same input and watermark, so it emits the
same rows. Cost: a batch reads the slots of the keys it brings and writes those of the keys
whose versions changed, each slot the state of about a 16,384th of the keys
(:data:`SLOTS_PER_BUCKET` slots per bucket), and one log entry per bucket.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle
from pyspark.sql.types import StructType

from riverbed.pipelines.operators.base import OUTPUT_SCHEMA, KeyedOperator, OutputRows, by_bucket
from riverbed.pipelines.operators.buckets import keep_log_timer, round_up
from riverbed.pipelines.operators.changelog import Change, MalformedChange, parse_change
from riverbed.pipelines.operators.inputs import with_event_time
from riverbed.pipelines.operators.json_rows import Row, dumps, loads, read_state, state_text
from riverbed.pipelines.operators.versioned_row import Version, VersionedRow

__all__ = ["AsOfJoin", "as_of_join"]

# The columns of the operator's input (as_of_join), besides the table key. Not "_..."
# names: the pandas frames of transformWithStateInPandas rename those to _1, _2, ...
KEY, EVENT_ID, EVENT_TS, EVENT, CHANGE_KEY, CHANGE_VALUE = (
    "as_of_key",
    "as_of_event_id",
    "as_of_event_ts",
    "as_of_event",
    "as_of_change_key",
    "as_of_change_value",
)
_OutRow = tuple[str, str, str | None]
LAYOUT = 3
"""The layout of a key's state (module docstring)."""
PRUNE_RESOLUTION_MS = 60_000
"""By default, a key's state is pruned at most this much event time after it could be."""
SLOTS_PER_BUCKET = 256
"""More slots than :data:`~riverbed.pipelines.operators.buckets.SLOTS`: every table key has a state
(a user's profile versions), so the slots are large, and a small micro-batch should not
rewrite much more than it changes."""
EVENTS_STATE = "events"
"""The map state of a bucket's events kept for corrections (:class:`_EventLog`)."""
INDEX_ENTRY = -1
"""The entry of :data:`EVENTS_STATE` that lists the others."""


@dataclass(slots=True, kw_only=True)
class _KeyState:
    """One table key's state: its versions and ``history_from``."""

    versions: VersionedRow
    history_from: int | None

    @classmethod
    def from_obj(cls, data: Any) -> tuple[_KeyState, dict[str, tuple[int, Row]] | None]:
        """The state, and the events a state of layout 2 kept in it (id -> (ts, event); None
        for a state of this layout or none)."""
        if data is None:
            return cls(versions=VersionedRow(), history_from=None), None
        layout = data.get("v", 1)
        if layout not in (2, LAYOUT):
            raise ValueError(
                f"an as-of join state of layout {layout}, not {LAYOUT}: the checkpoint was "
                "written by an earlier riverbed; start with a new checkpoint"
            )
        state = cls(
            versions=VersionedRow.from_obj(data["versions"]), history_from=data["history_from"]
        )
        if layout == 2:
            return state, {i: (int(ts), event) for i, (ts, event) in data["events"].items()}
        return state, None

    def to_obj(self) -> dict[str, Any]:
        return {"v": LAYOUT, "versions": self.versions.to_obj(), "history_from": self.history_from}


class _EventLog:
    """A bucket's events kept for corrections (module docstring, "State"): map state
    :data:`EVENTS_STATE`, entry ``n`` the events one call kept (the JSON object ``{table
    key: [[id, ts, event], ...]}``), entry :data:`INDEX_ENTRY` the list ``[[n, latest ts],
    ...]`` of the others. An entry is forgotten once its latest event is below the horizon
    and its time (:meth:`expiry`) has come; the bucket has a timer at the earliest entry's
    time. Reads go through a cache; :meth:`flush` at the end of every call."""

    def __init__(
        self, handle: StatefulProcessorHandle, *, retention_ms: int, resolution_ms: int
    ) -> None:
        self._handle = handle
        self._state = handle.getMapState(EVENTS_STATE, "entry LONG", "events STRING")
        self._retention_ms, self._resolution_ms = retention_ms, resolution_ms
        self._reset()

    def _reset(self) -> None:
        self._index: dict[int, int] | None = None
        self._entries: dict[int, dict[str, list[Any]]] = {}
        self._new: dict[str, list[Any]] = {}
        self._changed = False

    def expiry(self, latest_ms: int) -> int:
        """When an entry whose latest event is at ``latest_ms`` is forgotten: once the horizon
        has passed it, rounded up to the resolution."""
        return round_up(latest_ms + self._retention_ms + 1, self._resolution_ms)

    def _listed(self) -> dict[int, int]:
        if self._index is None:
            stored = self._state.getValue((INDEX_ENTRY,))
            listed = [] if stored is None else read_state(stored[0])
            self._index = {int(number): int(latest) for number, latest in listed}
        return self._index

    def _entry(self, number: int) -> dict[str, list[Any]]:
        entry = self._entries.get(number)
        if entry is None:
            stored = self._state.getValue((number,))
            entry = self._entries[number] = {} if stored is None else read_state(stored[0])
        return entry

    def add(self, table_key: str, event_id: str, ts: int, event: Row) -> None:
        self._new.setdefault(table_key, []).append([event_id, ts, event])

    def events_of(self, table_key: str, since_ms: int) -> list[tuple[str, int, Row]]:
        """The key's events kept at or after ``since_ms`` (id, ts, event), the last to
        arrive of each id. Only the entries whose latest event is at or after ``since_ms``
        are read."""
        found: dict[str, tuple[str, int, Row]] = {}
        for number, latest in sorted(self._listed().items()):
            if latest >= since_ms:
                for event_id, ts, event in self._entry(number).get(table_key, ()):
                    found[event_id] = (event_id, ts, event)
        for event_id, ts, event in self._new.get(table_key, ()):
            found[event_id] = (event_id, ts, event)
        return [event for event in found.values() if event[1] >= since_ms]

    def prune(self, watermark_ms: int) -> None:
        """Forget the entries whose time has come."""
        listed = self._listed()
        for number in [n for n, latest in listed.items() if self.expiry(latest) <= watermark_ms]:
            del listed[number]
            self._entries.pop(number, None)
            self._state.removeKey((number,))
            self._changed = True

    def flush(self, watermark_ms: int, *, after_input: bool) -> None:
        """Write the events added as a new entry and the index, and keep the bucket's timer
        at the earliest entry's time
        (:func:`~riverbed.pipelines.operators.buckets.keep_log_timer`)."""
        if self._new:
            listed = self._listed()
            number = max(listed, default=0) + 1
            self._state.updateValue((number,), (state_text(self._new, parsed=True),))
            listed[number] = max(ts for events in self._new.values() for _, ts, _ in events)
            self._changed = True
        if self._changed:
            listed = self._listed()
            if listed:
                index = [[number, latest] for number, latest in sorted(listed.items())]
                self._state.updateValue((INDEX_ENTRY,), (state_text(index),))
            else:
                self._state.removeKey((INDEX_ENTRY,))
            # after prune, the earliest entry's time is later than the watermark
            earliest = self.expiry(min(listed.values())) if listed else None
            keep_log_timer(
                self._handle, earliest, watermark_ms=watermark_ms, after_input=after_input
            )
        self._reset()


class AsOfJoin(KeyedOperator):
    """The as-of join of events with a changelog table (module docstring). Spark calls
    ``init`` once per task and partition, ``handleInputRows`` once per bucket and
    micro-batch with input, and ``handleExpiredTimer`` when the watermark passes a bucket's
    timer; the object is pickled to the executors."""

    def __init__(
        self,
        *,
        id_field: str,
        ts_field: str,
        columns: Sequence[str],
        topic: str,
        late_topic: str,
        retention_ms: int,
        prune_resolution_ms: int = PRUNE_RESOLUTION_MS,
    ) -> None:
        if retention_ms <= 0:
            raise ValueError(f"retention_ms must be positive, not {retention_ms}")
        if prune_resolution_ms <= 0:
            raise ValueError(f"prune_resolution_ms must be positive, not {prune_resolution_ms}")
        super().__init__(
            output_schema=OUTPUT_SCHEMA,
            state_name="keys",
            resolution_ms=prune_resolution_ms,
            slots=SLOTS_PER_BUCKET,
            parsed=True,  # events and rows as read, times as integers
        )
        self.id_field, self.ts_field = id_field, ts_field
        self.columns = list(columns)
        self.topic, self.late_topic = topic, late_topic
        self.retention_ms, self.prune_resolution_ms = retention_ms, prune_resolution_ms

    # -- the hooks (riverbed.pipelines.operators.base) ------------------------------------

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self.log = _EventLog(
            handle, retention_ms=self.retention_ms, resolution_ms=self.prune_resolution_ms
        )
        self._watermark_ms, self._after_input = 0, False

    def on_input(self, key: Any, batch: pd.DataFrame, watermark_ms: int) -> OutputRows:
        horizon = watermark_ms - self.retention_ms
        self._begin(watermark_ms, after_input=True)
        out: OutputRows = []
        by_key = _by_key(batch, self.columns)
        self.states.expect(len(by_key))
        for table_key, (events, changes) in by_key.items():
            if table_key is None:  # no table key: nothing to join with, nothing to correct
                out += [self._joined(event, None) for _, _, event in events]
                continue
            state, moved = self._load(table_key, self.states.get(table_key), horizon)
            if changes:
                fresh = {event_id for event_id, _, _ in events}
                out += self._apply(table_key, state, changes, fresh, watermark_ms, horizon)
            for event_id, ts, event in events:
                out.append(self._joined(event, state.versions.as_of(ts)))
                if ts < horizon:
                    out.append(self._late_event(event, ts, state, watermark_ms))
                else:
                    self.log.add(table_key, event_id, ts, event)
            if changes or moved:  # an event alone changes nothing in the key's state
                self._save(table_key, state, watermark_ms)
        return out

    def on_timer(self, key: Any, watermark_ms: int, expiry_ms: int) -> OutputRows:
        self._begin(watermark_ms, after_input=False)
        return super().on_timer(key, watermark_ms, expiry_ms)

    def on_due(self, name: str, state: Any, watermark_ms: int) -> OutputRows:
        """Forget the versions the horizon has passed, and list the key for what comes
        next."""
        horizon = watermark_ms - self.retention_ms
        key_state, _ = self._load(name, state, horizon)
        before = len(key_state.versions)
        key_state.versions.prune(horizon)
        if len(key_state.versions) < before:
            first = key_state.versions.versions[0]
            key_state.history_from = None if first.snapshot else first.ts_ms
        self._save(name, key_state, watermark_ms)
        return []  # forgetting writes nothing

    def flush(self) -> None:
        super().flush()
        self.log.flush(self._watermark_ms, after_input=self._after_input)

    def _begin(self, watermark_ms: int, *, after_input: bool) -> None:
        """At the start of a call: forget the events whose time has come."""
        self._watermark_ms, self._after_input = watermark_ms, after_input
        self.log.prune(watermark_ms)

    def _load(self, table_key: str, data: Any, horizon: int) -> tuple[_KeyState, bool]:
        """The key's state from its JSON; the events a state of layout 2 kept in it are
        moved to the log (those at or after the horizon). True: it was of layout 2, and
        must be written again."""
        state, events = _KeyState.from_obj(data)
        if events is None:
            return state, False
        for event_id, (ts, event) in events.items():
            if ts >= horizon:
                self.log.add(table_key, event_id, ts, event)
        return state, True

    # -- the join ------------------------------------------------------------------------

    def _apply(
        self,
        table_key: str,
        state: _KeyState,
        changes: list[tuple[Change, Version]],
        fresh: set[str],
        watermark: int,
        horizon: int,
    ) -> OutputRows:
        """Add a batch's versions; the corrected events and the late changes' reports. The
        events a change may correct are those kept (at or after the horizon) from its
        time on: the log reads only the entries that reach that time."""
        since = max(horizon, min(version.valid_from_ms for _, version in changes))
        kept = [
            (event_id, ts, event)
            for event_id, ts, event in self.log.events_of(table_key, since)
            if event_id not in fresh  # joined again below anyway
        ]
        lookups = [(event_id, ts) for event_id, ts, _ in kept]
        before = VersionedRow(state.versions.versions)
        touched: set[str] = set()
        out: OutputRows = []
        for change, version in changes:
            touched.update(state.versions.changed_by(version, lookups))
            if state.versions.add(version) and version.ts_ms < horizon:
                out.append(self._late_change(change, version, watermark, horizon))
        for event_id, ts, event in kept:
            if event_id in touched:
                row = state.versions.as_of(ts)
                if row != before.as_of(ts):
                    out.append(self._joined(event, row))
        return out

    def _joined(self, event: Row, row: Row | None) -> _OutRow:
        profile = {name: None if row is None else row.get(name) for name in self.columns}
        return self.topic, dumps({self.id_field: event[self.id_field]}), dumps(event | profile)

    def _late_event(self, event: Row, ts: int, state: _KeyState, watermark: int) -> _OutRow:
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

    def _save(self, table_key: str, state: _KeyState, watermark: int) -> None:
        """Store the key's state, due when the horizon passes the time from which a version
        is no longer needed
        (:meth:`~riverbed.pipelines.operators.versioned_row.VersionedRow.next_prune_ms`);
        not before the next watermark (a late change can make a version prunable
        already)."""
        prune_ms = state.versions.next_prune_ms()
        due = None
        if prune_ms is not None:
            due = max(prune_ms + self.retention_ms + 1, watermark + 1)  # horizon past it
        self.states.put(table_key, state.to_obj(), due_ms=due)


def _by_key(
    batch: pd.DataFrame, columns: Sequence[str]
) -> dict[str | None, tuple[list[tuple[str, int, Row]], list[tuple[Change, Version]]]]:
    """The batch's rows by table key: its events with an id and a time, (id, ts, event),
    the last of each id; and its well-formed changes that make a version (tombstones and
    truncates do not; a change without a table key is left out)."""
    events: dict[str | None, dict[str, tuple[str, int, Row]]] = {}
    changes: dict[str | None, list[tuple[Change, Version]]] = {}
    for table_key, event_id, ts, text, change_key, change_value in zip(
        *(batch[c].tolist() for c in (KEY, EVENT_ID, EVENT_TS, EVENT, CHANGE_KEY, CHANGE_VALUE)),
        strict=True,
    ):
        key = table_key if isinstance(table_key, str) else None
        if isinstance(text, str):
            if isinstance(event_id, str) and ts is not None and not pd.isna(ts):
                events.setdefault(key, {})[event_id] = (event_id, int(ts), loads(text))
        elif isinstance(change_value, str) and key is not None:
            try:
                change = parse_change(
                    change_key if isinstance(change_key, str) else None, change_value
                )
            except MalformedChange:
                continue  # not a change of the contract: left out, as other operators do
            version = Version.of(change, columns)
            if version is not None:
                changes.setdefault(key, []).append((change, version))
    return {
        key: (list(events.get(key, {}).values()), changes.get(key, []))
        for key in events.keys() | changes.keys()
    }


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
    :func:`~riverbed.pipelines.operators.inputs.json_events` parses them, the changes as
    :func:`~riverbed.pipelines.operators.inputs.changes` does) would scan every micro-batch
    twice.
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
        .alias(KEY),
        event[processor.id_field].cast("string").alias(EVENT_ID),
        event[processor.ts_field].cast("long").alias(EVENT_TS),
        F.when(F.col("is_event"), F.to_json(event, {"ignoreNullFields": "false"})).alias(EVENT),
        F.col(CHANGE_KEY),
        F.col(CHANGE_VALUE),
        F.coalesce(event[processor.ts_field].cast("long"), change_time).alias("as_of_time"),
    )
    timed = with_event_time(rows, delay, "as_of_time").drop("as_of_time")
    return by_bucket(timed, processor, KEY, time_mode="EventTime")
