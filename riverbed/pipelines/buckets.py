"""Many keys per group: sharing the fixed cost of PySpark's stateful operator between keys.

PySpark 4.3 calls a ``transformWithStateInPandas`` processor once per grouping key and
micro-batch, and each call has a fixed cost of about a millisecond on our machine: a pandas
DataFrame in and one out, the implicit key set and removed, and every state access a round
trip over a socket to the JVM. An operator whose key has one or two records per batch (a
search id, an order id) then spends most of its time there: ``search_ctr`` ran at 720
events/s that way.

Grouping by a **bucket** of the key instead (:func:`bucket_of`, a hash modulo
:data:`BUCKETS`) makes that cost once per bucket and batch. Within a bucket each key keeps
its own state, one entry of a MapState (:class:`KeyedStates`): a key then costs one state
read and one write per batch. The bucket is a function of the key alone, so a key's rows
always meet in the same bucket, exactly as they met in their own group before.

**Timers per key** (:class:`KeyedStates` with ``resolution_ms``): Spark's timers belong to
the grouping key, here the bucket. A key's next expiry is rounded *up* to a multiple of
``resolution_ms`` and the key is listed under that time in a second MapState (time → keys);
the bucket gets one timer per listed time. When it fires, :meth:`KeyedStates.due` gives the
keys listed under it whose entry still names that time (a key since re-listed under another
time, or removed, is skipped). A key is thus handled at most ``resolution_ms`` of event time
after its own expiry, never before it: its state is held that much longer.

The number of buckets is part of the state's layout: changing :data:`BUCKETS` needs a new
checkpoint, as changing ``spark.sql.shuffle.partitions`` does.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle

__all__ = ["BUCKET", "BUCKETS", "KeyedStates", "bucket_of", "round_up"]

BUCKETS = 64
"""Buckets per operator: enough to spread over any sensible number of shuffle partitions,
few enough that the per-bucket cost stays small in a small micro-batch."""
BUCKET = "bucket"
"""The grouping column :func:`bucket_of` is usually given as."""


def bucket_of(*columns: str | Column, buckets: int = BUCKETS) -> Column:
    """The bucket (``0 <= b < buckets``) of the key made of ``columns``: their 64-bit xxHash
    modulo ``buckets`` (a null key has a bucket too; the processor skips it)."""
    return F.pmod(F.xxhash64(*columns), F.lit(buckets)).cast("int")


def round_up(ms: int, resolution_ms: int) -> int:
    """``ms`` rounded up to a multiple of ``resolution_ms``."""
    return -(-ms // resolution_ms) * resolution_ms


class KeyedStates:
    """Per-key state within a bucket: a MapState ``name`` from the key (a string) to a JSON
    text, and, with ``resolution_ms``, each key's next expiry (module docstring).

    Call :meth:`flush` at the end of every ``handleInputRows`` and ``handleExpiredTimer``
    that changed expiries: it writes the time → keys lists and registers the new timers."""

    def __init__(
        self, handle: StatefulProcessorHandle, name: str, *, resolution_ms: int | None = None
    ) -> None:
        self._handle = handle
        self._states = handle.getMapState(name, "key STRING", "json STRING, due LONG")
        self._resolution = resolution_ms
        self._due = (
            None
            if resolution_ms is None
            else handle.getMapState(f"{name}_due", "at LONG", "keys STRING")
        )
        self._listed: dict[str, int | None] = {}
        self._pending: dict[int, set[str]] = {}

    def get(self, key: str) -> str | None:
        """The key's state, or None."""
        stored = self._states.getValue((key,))
        if stored is None:
            self._listed[key] = None
            return None
        self._listed[key] = None if stored[1] is None else int(stored[1])
        return str(stored[0])

    def put(self, key: str, text: str, *, due_ms: int | None = None) -> None:
        """Store the key's state, handled again once the watermark passes ``due_ms`` (None:
        no expiry). The key must have been read with :meth:`get` first."""
        at = None
        if due_ms is not None:
            if self._resolution is None:
                raise ValueError("these states have no timers (no resolution_ms)")
            at = round_up(due_ms, self._resolution)
            if at != self._listed[key]:
                self._pending.setdefault(at, set()).add(key)
        self._states.updateValue((key,), (text, at))
        self._listed[key] = at

    def remove(self, key: str) -> None:
        self._states.removeKey((key,))
        self._listed[key] = None

    def due(self, at: int) -> list[tuple[str, str]]:
        """The keys listed under the timer ``at`` that still wait for it, with their
        states. The list is removed: each key must be :meth:`put` again or removed."""
        if self._due is None:
            raise ValueError("these states have no timers (no resolution_ms)")
        stored = self._due.getValue((at,))
        self._due.removeKey((at,))
        if stored is None:
            return []
        waiting = []
        for key in json.loads(stored[0]):
            state = self._states.getValue((key,))
            if state is not None and state[1] == at:
                waiting.append((key, str(state[0])))
                self._listed[key] = None  # no longer listed anywhere
        return waiting

    def flush(self) -> None:
        """Write the time → keys lists changed since the last flush; register their
        timers."""
        if self._due is None:
            return
        for at, keys in sorted(self._pending.items()):
            stored = self._due.getValue((at,))
            if stored is None:
                self._handle.registerTimer(at)
                listed: Iterable[str] = keys
            else:
                listed = set(json.loads(stored[0])) | keys
            self._due.updateValue((at,), (json.dumps(sorted(listed)),))
        self._pending.clear()
        self._listed.clear()
