"""A CEP operator on Spark's stateful streaming: :class:`PatternMatches` runs a
:class:`riverbed.pipelines.operators.cep.Pattern` over each key's events in event-time
order (``transformWithStateInPandas``, EventTime mode), applied by :func:`match_pattern`;
the pure logic is :class:`riverbed.pipelines.operators.cep.KeyMatcher`, an
:class:`~riverbed.pipelines.operators.cep.OrderedMatcher` whose held events the operator
keeps apart.

**Input.** :func:`match_pattern` groups the events by one key column and hands the
processor, per key, the column and ``event``: each event's fields as one JSON object (nulls
kept), so that the events are held and written back exactly as they were parsed, with no
trip through pandas' types (a nullable integer column would come back as floats). Each event
needs an integer ``ts`` (epoch ms) and the tie-break field; leave out the others first.

**Order and lateness.** The events must carry a watermark
(:func:`~riverbed.pipelines.operators.inputs.with_event_time`, which keeps the watermarked
column out of the operator's input, so that Spark does not drop late rows unseen). A key's
events are held until the watermark passes them and then fed to the matcher in event-time
order, whatever order they arrived in. An event that arrives
below the watermark can no longer be put in order (the events after it may already have
been matched): it goes to the late topic, keyed by ``late_key_fields``, with a ``reason``
(:func:`late_reason`); never matched, never silently dropped.

**State.** Two map states per bucket of keys (the operator groups by a hash bucket of
the key: one group per key made PySpark's fixed cost per group the bulk of the work):

- ``held``, the bucket's held events (:class:`_HeldLog`), an entry per :data:`SPAN_MS` of
  event time: ``{key: [event, ...]}``, each event a row of ``held_fields`` without the key
  field (which every event of the key has, put back in a match's events before ``result``
  reads them), or the event's object without ``held_fields``; and an index of the spans.
  A micro-batch adds its events to the spans of their times and takes out the spans the
  watermark has passed whole, so it writes what it adds and reads what it releases, not
  every held event of every key it touches;
- ``matchers``, each key's :class:`~riverbed.pipelines.operators.cep.KeyMatcher` (its
  partial matches, the early matches not settled, and the matcher fed every event read so
  far), kept by :class:`riverbed.pipelines.operators.buckets.KeyedStates`, and removed
  when it holds nothing (a new key's would then do the same): most keys have none.

A key's events that arrive after all its held ones (the usual case) are matched early
from its state alone; one that arrives before a held one reads the bucket's log whole, once
in the call, to match early again from all of them. The state store is Spark's (RocksDB,
checkpointed), so after a crash the state and the timers are those of the last committed
micro-batch, and the batch is replayed from the same input. A key's state written before
the log (an :class:`~riverbed.pipelines.operators.cep.OrderedMatcher`'s, its events in it)
is advanced as it was then when next read, and its events moved to the log.

**Timers.** The bucket has a timer at the end of its earliest span: when the watermark
reaches it, the spans it has passed are released even if the bucket gets no more events.
A key with partial matches is due at
:meth:`~riverbed.pipelines.operators.cep.KeyMatcher.next_expiry_ms`, rounded up to
:data:`TIMER_RESOLUTION_MS`, for them to expire. An event is released (fed to its key's
matcher) once the watermark has passed its whole span, so a match is settled up to a span
later than the watermark passes it; what is matched does not change.

**Early matches** (``early=True``). A match is then written by the micro-batch that reads
its last event, not about the watermark delay later: the processor asks the key's matcher
for the matches its events complete so far (:mod:`riverbed.pipelines.operators.cep`, "Early
matches"). What a later event changes is written again: a changed match's new value, or a
tombstone (a null value) for a match that no longer stands; once the watermark passes a
match, it is written again only if it differs from what was written early. The output topic
is then a changelog whose last value per key is the result (DESIGN.md's reading of every
output), equal to the output without early matches; no record repeats its key's value
before it.

**Output.** Rows for the riverbed sink (``topic``, ``key``, ``value``; JSON strings,
:data:`~riverbed.pipelines.operators.base.OUTPUT_SCHEMA`): one per match (and per change of
an early one), as the caller's ``result`` function turns it into a (key, value) pair, and
one per late event; written in the micro-batch's transaction, so each exactly once.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle

from riverbed.pipelines.operators.base import OUTPUT_SCHEMA, KeyedOperator, OutputRows, by_bucket
from riverbed.pipelines.operators.buckets import keep_log_timer
from riverbed.pipelines.operators.cep import (
    Event,
    EventTimeBuffer,
    KeyMatcher,
    Match,
    Matched,
    OrderedMatcher,
    Pattern,
    in_event_time_order,
    stored_events,
)
from riverbed.pipelines.operators.json_rows import dumps, loads, read_state, state_text

__all__ = [
    "EVENT",
    "HELD_STATE",
    "KEY",
    "SPAN_MS",
    "TIMER_RESOLUTION_MS",
    "PatternMatches",
    "late_reason",
    "match_pattern",
    "release_point",
]

EVENT = "event"
"""The input column with each event's fields as a JSON object."""
KEY = "pattern_key"
"""The input column with each event's key (the ``key_field`` column)."""
TIMER_RESOLUTION_MS = 1_000
"""A key's timer is rounded up to this (:mod:`riverbed.pipelines.operators.buckets`): its
partial matches expire at most this much event time later than an exact timer would."""
SPAN_MS = TIMER_RESOLUTION_MS
"""The event time of one entry of a bucket's held events (module docstring, "State"): the
events are released a whole span at a time, at most this much event time after the
watermark has passed them."""
HELD_STATE = "held"
"""The map state of a bucket's held events, by span."""
INDEX_ENTRY = -1
"""The entry of :data:`HELD_STATE` that lists the ranges present."""
READ_ONE_BY_ONE = 8
"""A bucket's log is read whole with a ``getValue`` a range when at most this many ranges
are not read yet, else with one iteration of the map state."""

Result = Callable[[Match], tuple[dict[str, Any], dict[str, Any]]]
"""A match's output (key, value), both JSON objects."""


def late_reason(ts: int, watermark_ms: int) -> str:
    """Why an event at ``ts`` was not matched (``ts < watermark_ms``): the ``reason`` of a
    late event."""
    return (
        f"too late for event-time order: ts {ts} is below the watermark {watermark_ms}, so "
        "the events after it may already have been matched without it"
    )


class _HeldLog:
    """A bucket's held events (module docstring, "State"): map state :data:`HELD_STATE`,
    entry ``s`` the events of a *range* of spans from span ``s`` on (span ``n`` being the
    event time ``[n * SPAN_MS, (n + 1) * SPAN_MS)``), as the JSON object ``{key: [event,
    ...]}``; entry :data:`INDEX_ENTRY` the ranges, sorted and apart (each one's start, then
    its length, each number as the distance from the number before). A call's events go to
    the ranges that cover their spans, and those beyond them to one new range per gap: so
    a call that adds seconds of events writes one or two entries, and one that adds an
    hour of them (a large micro-batch) writes one too. Reads go through a cache;
    :meth:`flush` at the end of every call."""

    def __init__(self, handle: StatefulProcessorHandle, *, ts_at: int | None) -> None:
        self._handle = handle
        self._state = handle.getMapState(HELD_STATE, "span LONG", "events STRING")
        self._ts_at = ts_at
        """Where an event's ``ts`` is: its index in a row, or None for an object."""
        self._reset()

    def _reset(self) -> None:
        self._ranges: list[list[int]] | None = None
        self._entries: dict[int, dict[str, list[Any]]] = {}
        self._dirty: set[int] = set()
        self._removed: set[int] = set()
        self._added: dict[int, list[tuple[str, Any]]] = {}
        self._whole = False
        self._changed = False

    def ranges(self) -> list[list[int]]:
        """The ranges present, ``[start, end]`` (spans, the end not included), sorted."""
        if self._ranges is None:
            stored = self._state.getValue((INDEX_ENTRY,))
            bounds = list(itertools.accumulate([] if stored is None else read_state(stored[0])))
            self._ranges = [[bounds[i], bounds[i + 1]] for i in range(0, len(bounds), 2)]
        return self._ranges

    def _entry(self, start: int) -> dict[str, list[Any]]:
        entry = self._entries.get(start)
        if entry is None:
            stored = None if self._whole else self._state.getValue((start,))
            entry = self._entries[start] = {} if stored is None else read_state(stored[0])
        return entry

    def release(self, release_ms: int) -> dict[str, list[Any]]:
        """Take out the events below ``release_ms`` (a multiple of :data:`SPAN_MS`): each
        key's, in no particular order. A range it passes in part is kept from the span of
        its earliest event left."""
        ranges, cut = self.ranges(), release_ms // SPAN_MS
        out: dict[str, list[Any]] = {}
        kept: dict[str, list[Any]] = {}
        passed = 0
        while passed < len(ranges) and ranges[passed][0] < cut:
            start, end = ranges[passed]
            for key, events in self._entry(start).items():
                for event in events:
                    if self._ts(event) < release_ms:
                        out.setdefault(key, []).append(event)
                    else:
                        kept.setdefault(key, []).append(event)
            del self._entries[start]
            self._removed.add(start)
            passed += 1
        if passed:
            self._changed = True
            end = ranges[passed - 1][1]
            del ranges[:passed]
            if kept:  # from the last range passed (the others end before the cut)
                start = min(self._ts(e) for events in kept.values() for e in events) // SPAN_MS
                ranges.insert(0, [start, end])
                self._entries[start] = kept
                self._removed.discard(start)
                self._dirty.add(start)
        return out

    def since(self, key: str, ts: int) -> list[Any]:
        """The key's events held before this call in the ranges that reach ``ts``'s span
        (a superset of those at or after ``ts``): usually none, or those of the last range.
        Those added in the call are not looked at (an operator takes each key's events once
        a call)."""
        span = ts // SPAN_MS
        return [
            event
            for start, end in self.ranges()
            if end > span
            for event in self._entry(start).get(key, ())
        ]

    def of(self, key: str) -> list[Any]:
        """All the key's events held before this call: the bucket's log read whole, once per
        call (a range at a time when few are not read yet: an iteration of the map state
        would also fetch the entries released in the call, not yet removed)."""
        if not self._whole:
            unread = [start for start, _ in self.ranges() if start not in self._entries]
            if len(unread) <= READ_ONE_BY_ONE:
                for start in unread:
                    self._entry(start)
            else:
                for (start,), (text,) in self._state.iterator():
                    known = start in self._entries or start in self._removed
                    if start != INDEX_ENTRY and not known:
                        self._entries[start] = read_state(text)
            self._whole = True
        return [e for start, _ in self.ranges() for e in self._entry(start).get(key, ())]

    def add(self, key: str, ts: int, event: Any) -> None:
        """Hold ``event`` (its time ``ts``), placed at :meth:`flush`."""
        self._added.setdefault(ts // SPAN_MS, []).append((key, event))

    def _place(self) -> None:
        """Put the events added in their ranges: a span a range covers, in it; the others,
        in a new range per gap between the ranges (:meth:`release` has run: no range
        starts at a span of theirs)."""
        ranges = self.ranges()
        starts = [start for start, _ in ranges]
        gaps: dict[int, list[int]] = {}
        for span in sorted(self._added):
            at = bisect.bisect_right(starts, span) - 1
            if at >= 0 and span < ranges[at][1]:
                start = ranges[at][0]
                entry = self._entry(start)
                for key, event in self._added[span]:
                    entry.setdefault(key, []).append(event)
                self._dirty.add(start)
            else:
                gaps.setdefault(at, []).append(span)
        for spans in gaps.values():
            start, entry = spans[0], {}
            for span in spans:
                for key, event in self._added[span]:
                    entry.setdefault(key, []).append(event)
            bisect.insort(ranges, [start, spans[-1] + 1])
            self._entries[start] = entry
            self._removed.discard(start)
            self._dirty.add(start)
            self._changed = True

    def flush(self, watermark_ms: int, *, after_input: bool) -> None:
        """Place the events added, write the entries changed and the index; keep the
        bucket's timer at the end of its earliest range's first span
        (:func:`~riverbed.pipelines.operators.buckets.keep_log_timer`)."""
        if self._added:
            self._place()
        for start in sorted(self._removed - self._dirty):
            self._state.removeKey((start,))
        for start in sorted(self._dirty):
            self._state.updateValue((start,), (state_text(self._entries[start], parsed=True),))
        if self._changed:
            ranges = self.ranges()
            if ranges:
                bounds = [bound for pair in ranges for bound in pair]
                deltas = [bounds[0]] + [b - a for a, b in itertools.pairwise(bounds)]
                self._state.updateValue((INDEX_ENTRY,), (state_text(deltas),))
            else:
                self._state.removeKey((INDEX_ENTRY,))
            at = (ranges[0][0] + 1) * SPAN_MS if ranges else None
            keep_log_timer(self._handle, at, watermark_ms=watermark_ms, after_input=after_input)
        self._reset()

    def _ts(self, event: Any) -> int:
        ts: int = event["ts"] if self._ts_at is None else event[self._ts_at]
        return ts


class PatternMatches(KeyedOperator):
    """The matches of ``pattern`` in each key's events, in event-time order, ties broken by
    ``tiebreak_field`` (module docstring); the events held are their ``held_fields``, the
    fields the pattern's conditions and ``result`` read (``None``: all; a late event is
    written whole); with ``early``, matches are written as soon as their events are read,
    and corrected (module docstring). Must be picklable: Spark sends it to the
    executors, and ``init`` runs there before its first key (and once on the
    driver, to learn the state schema)."""

    def __init__(
        self,
        *,
        pattern: Pattern,
        key_field: str,
        tiebreak_field: str,
        topic: str,
        result: Result,
        late_topic: str,
        late_key_fields: Sequence[str],
        held_fields: Sequence[str] | None = None,
        early: bool = False,
    ) -> None:
        super().__init__(
            output_schema=OUTPUT_SCHEMA, state_name="matchers", resolution_ms=TIMER_RESOLUTION_MS
        )
        self.pattern = pattern
        self.key_field, self.tiebreak_field = key_field, tiebreak_field
        self.topic, self.result = topic, result
        self.late_topic, self.late_key_fields = late_topic, list(late_key_fields)
        self.held_fields = None if held_fields is None else tuple(held_fields)
        self._held = self.held_fields
        """What is held of an event: ``held_fields`` but the key field, which every event
        of the key has (put back before ``result``, :meth:`_keyed`)."""
        if self._held is not None and key_field not in ("ts", tiebreak_field):
            self._held = tuple(f for f in self._held if f != key_field)
        self.early = early

    # -- the hooks (riverbed.pipelines.operators.base) ------------------------------------

    def init(self, handle: StatefulProcessorHandle) -> None:
        super().init(handle)
        self._stored, self._event = stored_events(self._held)  # here: closures do not pickle
        self.log = _HeldLog(handle, ts_at=None if self._held is None else self._held.index("ts"))
        self._keys: dict[str, KeyMatcher] = {}
        self._watermark_ms, self._after_input = 0, False

    def on_input(self, key: Any, batch: pd.DataFrame, watermark_ms: int) -> OutputRows:
        by_key: dict[str, list[Event]] = {}
        parsed = loads(f"[{','.join(batch[EVENT].tolist())}]")  # one call: a third faster
        for value, event in zip(batch[KEY].tolist(), parsed, strict=True):
            by_key.setdefault(dumps(value), []).append(event)
        out = self._release(watermark_ms, after_input=True, reading=len(by_key))
        for name, events in by_key.items():
            out += self._take(name, events, watermark_ms)
        self._save()
        return out

    def on_timer(self, key: Any, watermark_ms: int, expiry_ms: int) -> OutputRows:
        out = self._release(watermark_ms, after_input=False, reading=0)
        self._save()
        return out + super().on_timer(key, watermark_ms, expiry_ms)

    def on_due(self, name: str, state: Any, watermark_ms: int) -> OutputRows:
        """A key's partial matches may have expired (nothing is released here: the log
        releases every key's events)."""
        out: OutputRows = []
        if KeyMatcher.is_state(state):
            held = self._loaded(state)
            held.expire(release_point(watermark_ms))
        else:  # written before held events were kept apart: its own buffer releases them
            held, out = self._moved(name, state, [], watermark_ms)
        self._keys[name] = held
        self._save()
        return out

    def flush(self) -> None:
        super().flush()
        self.log.flush(self._watermark_ms, after_input=self._after_input)

    # -- the keys' events ----------------------------------------------------------------

    def _release(self, watermark_ms: int, *, after_input: bool, reading: int) -> OutputRows:
        """At the start of a call: feed each key the events the watermark has released
        (whole spans below it)."""
        self._watermark_ms, self._after_input = watermark_ms, after_input
        release_ms = release_point(watermark_ms)
        released = self.log.release(release_ms)
        self.states.expect(reading + len(released))
        out: OutputRows = []
        for name, stored in released.items():
            events = in_event_time_order(
                map(self._event, stored), tiebreak_field=self.tiebreak_field
            )
            out += self._records(name, self._key(name).release(events, release_ms))
        return out

    def _take(self, name: str, events: list[Event], watermark_ms: int) -> OutputRows:
        """A key's events of the micro-batch: those below the watermark aside (late), the
        others to the log, and matched early."""
        key = self._keys.get(name)
        if key is None:
            stored = self.states.get(name)
            if stored is not None and not KeyMatcher.is_state(stored):
                self._keys[name], out = self._moved(name, stored, events, watermark_ms)
                return out
            key = self._keys[name] = self._loaded(stored)
        buffer = EventTimeBuffer(tiebreak_field=self.tiebreak_field, held_fields=self._held)
        late = buffer.advance(events, watermark_ms=watermark_ms).late
        new = buffer._held
        given: list[Match] = []
        withdrawn: list[Match] = []
        if new:
            first = buffer.order(new[0])
            after = [e for e in map(self._event, self.log.since(name, first[0]))
                     if buffer.order(e) >= first]  # fmt: skip
            if after:  # an event arrived before one held: match early from all of them
                held = [*map(self._event, self.log.of(name)), *new]
                order = in_event_time_order(held, tiebreak_field=self.tiebreak_field)
                given, withdrawn = key.rebuild(order)
            else:
                given = key.append(new)
            for event in new:
                self.log.add(name, event["ts"], self._stored(event))
        return self._records(name, Matched(matches=[], late=late, early=given, withdrawn=withdrawn))

    def _moved(
        self, name: str, stored: Any, events: list[Event], watermark_ms: int
    ) -> tuple[KeyMatcher, OutputRows]:
        """A key whose state holds its events (an :class:`OrderedMatcher`'s, written
        before they were kept apart): advanced as it was then, and its held events moved to
        the log."""
        ordered = OrderedMatcher.from_obj(
            stored, pattern=self.pattern, tiebreak_field=self.tiebreak_field, held_fields=self._held
        )
        matched = ordered.advance(events, watermark_ms=watermark_ms, early=self.early)
        for event in ordered.buffer._held:
            self.log.add(name, event["ts"], self._stored(event))
        return KeyMatcher.of_ordered(ordered, early=self.early), self._records(name, matched)

    # -- the keys' states ----------------------------------------------------------------

    def _key(self, name: str) -> KeyMatcher:
        """The key's matcher, read once per call (a new one: its state is empty)."""
        key = self._keys.get(name)
        if key is None:
            key = self._keys[name] = self._loaded(self.states.get(name))
        return key

    def _loaded(self, stored: Any) -> KeyMatcher:
        """The matcher of a stored state of this version, or a new one (None)."""
        if stored is None:
            return KeyMatcher(self.pattern, early=self.early, held_fields=self._held)
        return KeyMatcher.from_obj(
            stored, pattern=self.pattern, early=self.early, held_fields=self._held
        )

    def _save(self) -> None:
        """Store the keys' matchers of the call, each listed for when its partial matches
        expire; an empty one is removed (module docstring, "State")."""
        for name, key in self._keys.items():
            if key.is_empty():
                self.states.remove(name)
            else:
                self.states.put(name, key.to_obj(), due_ms=key.next_expiry_ms())
        self._keys.clear()

    # -- the output ----------------------------------------------------------------------

    def _records(self, name: str, matched: Matched) -> OutputRows:
        """The output rows of what a key's matcher gave: a match given early that changed
        is written again under its key (unless its result is the same); one that no longer
        stands, or now has another key, gets a tombstone; late events go aside."""
        out: OutputRows = []
        if matched.matches or matched.early or matched.withdrawn:
            result = self._keyed(name)
            was = {dumps(k): dumps(v) for k, v in map(result, matched.withdrawn)}
            now = {dumps(k): dumps(v) for k, v in map(result, matched.matches + matched.early)}
            out += [(self.topic, key, None) for key in was if key not in now]
            out += [(self.topic, key, value) for key, value in now.items() if was.get(key) != value]
        for event in matched.late:
            late_key = {field: event.get(field) for field in self.late_key_fields}
            value = {**event, "reason": late_reason(event["ts"], self._watermark_ms)}
            out.append((self.late_topic, dumps(late_key), dumps(value)))
        return out

    def _keyed(self, name: str) -> Result:
        """``result`` of a match of the key ``name`` (its JSON text), given the match's
        events with the key field put back when the log does not hold it."""
        fields = self.held_fields
        if fields is None or self._held == fields:
            return self.result
        field, key = self.key_field, loads(name)

        def result(match: Match) -> tuple[dict[str, Any], dict[str, Any]]:
            keyed = {
                step: [{f: key if f == field else e[f] for f in fields} for e in events]
                for step, events in match.items()
            }
            return self.result(keyed)

        return result


def release_point(watermark_ms: int) -> int:
    """The events below this are released when the watermark is ``watermark_ms``: the
    start of the watermark's span (module docstring, "State")."""
    return watermark_ms // SPAN_MS * SPAN_MS


def match_pattern(
    events: DataFrame, processor: PatternMatches, *, event_fields: Sequence[str]
) -> DataFrame:
    """Apply :class:`PatternMatches` to ``events`` (with a watermark, each with its key, an
    integer ``ts`` and the tie-break field), grouped by ``processor.key_field``; the events
    the processor holds and writes are their ``event_fields``."""
    packed = events.select(
        F.col(processor.key_field).alias(KEY),
        F.to_json(F.struct(*event_fields), {"ignoreNullFields": "false"}).alias(EVENT),
    )
    return by_bucket(packed, processor, KEY, time_mode="EventTime")
