"""A CEP operator on Spark's stateful streaming: :class:`PatternMatches` runs a
:class:`riverbed.pipelines.cep.Pattern` over each key's events in event-time order
(``transformWithStateInPandas``, EventTime mode), the pure logic being
:class:`riverbed.pipelines.cep.OrderedMatcher`.

**Input.** :func:`match_pattern` groups the events by one key column and hands the
processor, per key, the column and ``event``: each event's fields as one JSON object (nulls
kept), so that the events are held and written back exactly as they were parsed, with no
trip through pandas' types (a nullable integer column would come back as floats). Each event
needs an integer ``ts`` (epoch ms) and the tie-break field; leave out the others first.

**Order and lateness.** The events must carry a watermark (:func:`operators.with_event_time`,
which keeps the watermarked column out of the operator's input, so that Spark does not drop
late rows unseen). A key's events are held until the watermark passes them and then fed to
the matcher in event-time order, whatever order they arrived in. An event that arrives
below the watermark can no longer be put in order (the events after it may already have
been matched): it goes to the late topic, keyed by ``late_key_fields``, with a ``reason``
(:func:`late_reason`); never matched, never silently dropped.

**State.** One ``ValueState`` per key, ``state STRING``: :meth:`OrderedMatcher.to_state`
(the held events, the watermark, the matcher's partial matches). It is cleared when nothing
is held: the next event of the key is then at or above the watermark, so a fresh matcher
behaves as the old one would. The state store is Spark's (RocksDB, checkpointed), so after
a crash the state and the timers are those of the last committed micro-batch, and the batch
is replayed from the same input.

**Timers.** One event-time timer per key, at :meth:`OrderedMatcher.next_timer_ms` of the
stored state (always later than the watermark): when the watermark reaches it, the
processor advances the matcher with no events, so held events are released and matched, and
partial matches expire, even if the key gets no more events. Whenever the stored state's
timer changes, the old timer is deleted and the new one registered, so the timers a key has
are exactly the one its state asks for.

**Output.** Rows for the riverbed sink (``topic``, ``key``, ``value``; JSON strings,
:data:`operators.OUTPUT_SCHEMA`): one per match, as the caller's ``result`` function turns
it into a (key, value) pair, and one per late event; written in the micro-batch's
transaction, so each exactly once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from riverbed.pipelines.cep import Event, Match, OrderedMatcher, Pattern
from riverbed.pipelines.operators import OUTPUT_SCHEMA, dumps, output_rows

__all__ = ["EVENT", "PatternMatches", "late_reason", "match_pattern"]

EVENT = "event"
"""The input column with each event's fields as a JSON object."""

Result = Callable[[Match], tuple[dict[str, Any], dict[str, Any]]]
"""A match's output (key, value), both JSON objects."""


def late_reason(ts: int, watermark_ms: int) -> str:
    """Why an event at ``ts`` was not matched (``ts < watermark_ms``): the ``reason`` of a
    late event."""
    return (
        f"too late for event-time order: ts {ts} is below the watermark {watermark_ms}, so "
        "the events after it may already have been matched without it"
    )


class PatternMatches(StatefulProcessor):
    """The matches of ``pattern`` in each key's events, in event-time order, ties broken by
    ``tiebreak_field`` (module docstring). Must be picklable: Spark sends it to the
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
    ) -> None:
        self.pattern = pattern
        self.key_field, self.tiebreak_field = key_field, tiebreak_field
        self.topic, self.result = topic, result
        self.late_topic, self.late_key_fields = late_topic, list(late_key_fields)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("matcher", "state STRING")

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        events = [json.loads(text) for frame in rows for text in frame[EVENT]]
        yield self._advance(events, timerValues.getCurrentWatermarkInMs(), fired_ms=None)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        yield self._advance(
            [],
            timerValues.getCurrentWatermarkInMs(),
            fired_ms=expiredTimerInfo.getExpiryTimeInMs(),
        )

    def close(self) -> None:
        pass

    def _load(self) -> OrderedMatcher:
        stored = self.state.get() if self.state.exists() else None
        if stored is None:
            return OrderedMatcher(self.pattern, tiebreak_field=self.tiebreak_field)
        return OrderedMatcher.from_state(
            str(stored[0]), pattern=self.pattern, tiebreak_field=self.tiebreak_field
        )

    def _advance(
        self, events: Iterable[Event], watermark_ms: int, *, fired_ms: int | None
    ) -> pd.DataFrame:
        """Advance the key's matcher, store it, keep its timer; the output rows.
        ``fired_ms``: the timer being handled (Spark deletes it afterwards)."""
        ordered = self._load()
        before = ordered.next_timer_ms()
        matched = ordered.advance(events, watermark_ms=watermark_ms)
        after = ordered.next_timer_ms()
        if after != before:
            if before is not None and before != fired_ms:
                self.handle.deleteTimer(before)
            if after is not None:
                self.handle.registerTimer(after)
        if after is None:
            self.state.clear()  # nothing held (module docstring)
        else:
            self.state.update((ordered.to_state(),))
        out = []
        for match in matched.matches:
            result_key, value = self.result(match)
            out.append((self.topic, dumps(result_key), dumps(value)))
        reached = ordered.buffer.watermark_ms  # what the late events were compared with
        assert reached is not None  # set by advance
        for event in matched.late:
            late_key = {name: event.get(name) for name in self.late_key_fields}
            value = {**event, "reason": late_reason(event["ts"], reached)}
            out.append((self.late_topic, dumps(late_key), dumps(value)))
        return output_rows(out)


def match_pattern(
    events: DataFrame, processor: PatternMatches, *, event_fields: Sequence[str]
) -> DataFrame:
    """Apply :class:`PatternMatches` to ``events`` (with a watermark, each with its key, an
    integer ``ts`` and the tie-break field), grouped by ``processor.key_field``; the events
    the processor holds and writes are their ``event_fields``."""
    packed = events.select(
        F.col(processor.key_field),
        F.to_json(F.struct(*event_fields), {"ignoreNullFields": "false"}).alias(EVENT),
    )
    return packed.groupBy(processor.key_field).transformWithStateInPandas(
        processor, OUTPUT_SCHEMA, "append", "EventTime"
    )
