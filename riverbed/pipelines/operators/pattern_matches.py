"""A CEP operator on Spark's stateful streaming: :class:`PatternMatches` runs a
:class:`riverbed.pipelines.operators.cep.Pattern` over each key's events in event-time
order (``transformWithStateInPandas``, EventTime mode), applied by :func:`match_pattern`;
the pure logic is :class:`riverbed.pipelines.operators.cep.OrderedMatcher`.

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

**State.** Per key, :meth:`OrderedMatcher.to_obj` (the held events, the watermark, the
matcher's partial matches; given ``held_fields``, each event as a row of them without the
key field, which every event of the key has and which is put back in a match's events
before ``result`` reads them), kept by
:class:`riverbed.pipelines.operators.buckets.KeyedStates` in the map state ``matchers``: the
operator groups by a hash bucket of the key (one group per key made PySpark's fixed cost
per group the bulk of the work). A key's state is removed when nothing is held: the next
event of the key is then at or above the watermark, so a fresh matcher behaves as the old
one would. The state store is Spark's (RocksDB, checkpointed), so after a crash the state
and the timers are those of the last committed micro-batch, and the batch is replayed from
the same input.

**Timers.** Each key is due at :meth:`OrderedMatcher.next_timer_ms` of its state (always
later than the watermark), rounded up to :data:`TIMER_RESOLUTION_MS`: when the watermark
reaches it, the processor advances the key's matcher with no events, so held events are
released and matched, and partial matches expire, even if the key gets no more events.
Since the matcher is advanced with the watermark itself, the rounding changes when a match
is written, never what it is.

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

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from riverbed.pipelines.operators.base import OUTPUT_SCHEMA, KeyedOperator, OutputRows, by_bucket
from riverbed.pipelines.operators.cep import Event, Match, OrderedMatcher, Pattern
from riverbed.pipelines.operators.json_rows import dumps, loads

__all__ = ["EVENT", "KEY", "TIMER_RESOLUTION_MS", "PatternMatches", "late_reason", "match_pattern"]

EVENT = "event"
"""The input column with each event's fields as a JSON object."""
KEY = "pattern_key"
"""The input column with each event's key (the ``key_field`` column)."""
TIMER_RESOLUTION_MS = 1_000
"""A key's timer is rounded up to this (:mod:`riverbed.pipelines.operators.buckets`): its
matches are written at most this much event time later than an exact timer would."""

Result = Callable[[Match], tuple[dict[str, Any], dict[str, Any]]]
"""A match's output (key, value), both JSON objects."""


def late_reason(ts: int, watermark_ms: int) -> str:
    """Why an event at ``ts`` was not matched (``ts < watermark_ms``): the ``reason`` of a
    late event."""
    return (
        f"too late for event-time order: ts {ts} is below the watermark {watermark_ms}, so "
        "the events after it may already have been matched without it"
    )


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
        """What the key's state holds of an event: ``held_fields`` but the key field, which
        every event of the key has (put back before ``result``, :meth:`_keyed`)."""
        if self._held is not None and key_field not in ("ts", tiebreak_field):
            self._held = tuple(f for f in self._held if f != key_field)
        self.early = early

    def on_input(self, key: Any, batch: pd.DataFrame, watermark_ms: int) -> OutputRows:
        by_key: dict[str, list[Event]] = {}
        parsed = loads(f"[{','.join(batch[EVENT].tolist())}]")  # one call: a third faster
        for value, event in zip(batch[KEY].tolist(), parsed, strict=True):
            by_key.setdefault(dumps(value), []).append(event)
        self.states.expect(len(by_key))
        out: OutputRows = []
        for name, events in by_key.items():
            out += self._advance(name, self.states.get(name), events, watermark_ms)
        return out

    def on_due(self, name: str, state: Any, watermark_ms: int) -> OutputRows:
        return self._advance(name, state, [], watermark_ms)

    def _advance(
        self, name: str, stored: Any, events: Iterable[Event], watermark_ms: int
    ) -> OutputRows:
        """Advance the key's matcher, store it, list it for its next timer; the output
        rows."""
        if stored is None:
            ordered = OrderedMatcher(
                self.pattern, tiebreak_field=self.tiebreak_field, held_fields=self._held
            )
        else:
            ordered = OrderedMatcher.from_obj(
                stored,
                pattern=self.pattern,
                tiebreak_field=self.tiebreak_field,
                held_fields=self._held,
            )
        matched = ordered.advance(events, watermark_ms=watermark_ms, early=self.early)
        after = ordered.next_timer_ms()
        if after is None:
            self.states.remove(name)  # nothing held (module docstring)
        else:
            self.states.put(name, ordered.to_obj(), due_ms=after)
        # A match given early that changed is written again under its key (unless its
        # result is the same); one that no longer stands, or now has another key, gets a
        # tombstone.
        out: OutputRows = []
        if matched.matches or matched.early or matched.withdrawn:
            result = self._keyed(name)
            was = {dumps(k): dumps(v) for k, v in map(result, matched.withdrawn)}
            now = {dumps(k): dumps(v) for k, v in map(result, matched.matches + matched.early)}
            out += [(self.topic, key, None) for key in was if key not in now]
            out += [(self.topic, key, value) for key, value in now.items() if was.get(key) != value]
        reached = ordered.buffer.watermark_ms  # what the late events were compared with
        assert reached is not None  # set by advance
        for event in matched.late:
            late_key = {field: event.get(field) for field in self.late_key_fields}
            value = {**event, "reason": late_reason(event["ts"], reached)}
            out.append((self.late_topic, dumps(late_key), dumps(value)))
        return out

    def _keyed(self, name: str) -> Result:
        """``result`` of a match of the key ``name`` (its JSON text), given the match's
        events with the key field put back when the state does not hold it."""
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
