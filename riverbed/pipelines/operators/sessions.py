"""Session windows per user: :class:`SessionWindows` on Spark's stateful streaming
(``transformWithStateInPandas``, EventTime mode), applied by :func:`sessions`; the session
logic is :mod:`riverbed.pipelines.operators.windows`.

A user's events belong to one session while less than ``gap_ms`` passes between
consecutive events. A session is emitted once, when the watermark passes its end (the time
of its last event) plus the gap: no later event can extend it then. Events older than the
watermark are dropped (they could belong to a session already emitted).

**State**, per user (Spark's state store, RocksDB, checkpointed): the map state
``sessions``, start -> (end, events), and a timer at each session's end plus the gap.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle

from riverbed.pipelines.operators.base import OUTPUT_SCHEMA, Operator, OutputRows
from riverbed.pipelines.operators.json_rows import dumps, plain
from riverbed.pipelines.operators.windows import Session, closed_sessions, merge_sessions

__all__ = ["SessionWindows", "sessions"]


class SessionWindows(Operator):
    """Sessions per user (module docstring), written to ``topic`` keyed ``user_field`` and
    ``session_start``, the value with ``session_end`` and the events as ``count_field``."""

    def __init__(self, *, user_field: str, gap_ms: int, topic: str, count_field: str) -> None:
        super().__init__(output_schema=OUTPUT_SCHEMA)
        self.user_field, self.gap_ms = user_field, gap_ms
        self.topic, self.count_field = topic, count_field

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getMapState("sessions", "start LONG", "end LONG, events LONG")

    def _load(self) -> list[Session]:
        if not self.state.exists():
            return []
        return [Session(int(k[0]), int(v[0]), int(v[1])) for k, v in self.state.iterator()]

    def _save(self, before: list[Session], after: list[Session]) -> None:
        for session in before:
            self.state.removeKey((session.start,))
            self.handle.deleteTimer(session.end + self.gap_ms)
        for session in after:
            self.state.updateValue((session.start,), (session.end, session.events))
            self.handle.registerTimer(session.end + self.gap_ms)

    def on_input(self, key: Any, batch: pd.DataFrame, watermark_ms: int) -> OutputRows:
        if key[0] is None:
            return []  # page views without a user have no session
        ts = batch["ts"].dropna().to_numpy(dtype=np.int64)
        on_time = ts[ts >= watermark_ms].tolist()
        if on_time:
            before = self._load()
            self._save(before, merge_sessions(before, on_time, self.gap_ms))
        return []

    def on_timer(self, key: Any, watermark_ms: int, expiry_ms: int) -> OutputRows:
        closed, _ = closed_sessions(self._load(), expiry_ms, self.gap_ms)
        out: OutputRows = []
        user = plain(key[0])
        for session in closed:
            self.state.removeKey((session.start,))
            result_key = {self.user_field: user, "session_start": session.start}
            value = {
                self.user_field: user,
                "session_start": session.start,
                "session_end": session.end,
                self.count_field: session.events,
            }
            out.append((self.topic, dumps(result_key), dumps(value)))
        return out


def sessions(events: DataFrame, processor: SessionWindows) -> DataFrame:
    """Apply :class:`SessionWindows` to ``events`` (with ``processor.user_field`` and an
    integer ``ts``; they need a watermark:
    :func:`~riverbed.pipelines.operators.inputs.with_event_time`)."""
    return events.groupBy(processor.user_field).transformWithStateInPandas(
        processor, processor.output_schema, "append", "EventTime"
    )
