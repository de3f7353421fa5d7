"""Many keys per group: sharing the fixed cost of PySpark's stateful operator between keys.

PySpark 4.3 calls a ``transformWithStateInPandas`` processor once per grouping key and
micro-batch, and each call has a fixed cost of about 0.65 ms on our machine: a pandas
DataFrame in and one out, the implicit key set and removed, and every state access a round
trip over a socket to the JVM. An operator whose key has one or two records per batch (a
search id, an order id) then spends most of its time there: an interval join keyed by
search id ran at 720 events/s that way.

Grouping by a **bucket** of the key instead (:func:`bucket_of`, a hash modulo
:data:`BUCKETS`) makes that cost once per bucket and batch. Within a bucket each key keeps
its own state (:class:`KeyedStates`), a JSON-able value. The bucket is a function of the key
alone, so a key's rows always meet in the same bucket, exactly as they met in their own
group before.

**Slots.** A state access is itself a round trip to the JVM (40 µs measured by
``benchmarks/tws_state_calls.py`` on the Intel machine, 340 µs on a slower day of the AMD
one), so the keys' states are not one map state entry each:
the bucket's keys are spread over ``slots`` entries (a CRC-32 of the key modulo
``slots``), each holding its keys' states, read once and written once per batch that
touches it. A large batch then costs a thousand or two state calls instead of two per
key, at the price of rewriting a whole slot for a change to one of its keys: with
:data:`BUCKETS` times :data:`SLOTS` = 1,024 slots, 100,000 live keys make slots of about 100
keys.

**A slot's text** is a line per key, not one JSON object: the layout (``#16``), then
``key<TAB>state`` lines, each state its own JSON text (``[state]``, or ``[state, listed
time]``). Reading a slot splits it into lines; a key's state is parsed only when the key is
read, and a key not written (:meth:`KeyedStates.put`) is written back as the text it was
read as. A micro-batch that touches a few keys of a slot of a hundred then parses and writes
JSON for those few, not for the hundred (``enriched_clicks``' batches touch about a fifth of
its users; BENCHMARKS.md).
In a slot with a key that holds a tab or a line break (keys are JSON texts or a column's
strings), every key is written as a JSON string after a NUL, and the layout line ends with
one. Slots were one JSON object ``{key: state, "#": slots}`` until 2026-11-29; that form is
still read.

**Reading a bucket at once.** A large micro-batch touches most slots of every bucket
(``fraud_alerts``: 100,000 payments of 25,000 live cards touch nearly all of them), and a
``getValue`` per slot is a round trip each. When an operator is about to read as many keys
as a quarter of the slots (:meth:`KeyedStates.expect`), the whole bucket is read with one
iteration of the map state instead, which PySpark fetches a batch of entries per round
trip. A small batch still reads only the slots it touches.

**Timers per key** (``resolution_ms``): Spark's timers belong to the grouping key, here the
bucket. A key's next expiry is rounded *up* to a multiple of ``resolution_ms`` and the key
is listed under that time in a second map state (time → keys). The bucket has a timer at
its earliest listed time (a third state remembers it). When a timer fires,
:meth:`KeyedStates.due` sweeps every list the watermark has reached: the keys whose state
still names that time (a key since re-listed under another time, or removed, is skipped),
each slot read and written once; then the bucket's timer moves to the earliest time still
listed. A key is thus handled at most ``resolution_ms`` of event time after its own expiry,
never before it: its state is held that much longer. A timer per listed time instead cost
hundreds of timer calls per bucket in a micro-batch that covers minutes of event time.

**Due with the input** (:meth:`KeyedStates.due_now`): Spark fires a bucket's timer after
the batch's input, when the input's call has already written the slots; the timer's call
then read and wrote most of them again. When a bucket has input in a batch whose watermark
has reached its timer, the keys due are swept in the input's call instead, with its slots
still cached, and the timer is deleted before it fires: each slot is read and written once
per batch (``fraud_alerts`` 15,158 → 21,333 events/s, BENCHMARKS.md).

**Pages of times.** The time → keys lists are kept a minute of event time to a map state
entry (a *page*, :data:`PAGE_MS`, keyed by its first possible time, the value a JSON object
time → keys): a micro-batch that moves the watermark by minutes passes hundreds of listed times per
bucket, and a state call per time (a read and a removal when due, a read and a write when
listed) was the bulk of ``fraud_alerts``' time. A page's entry is read and written once per
batch that lists a time in it or sweeps it. An entry that holds a list instead (one time, as
the lists were kept before pages) is read as that time's list.

**Layout.** The number of buckets is part of the state's layout: changing it needs a new
checkpoint, as changing ``spark.sql.shuffle.partitions`` does. The number of slots is not:
each slot names it (an entry :data:`LAYOUT`), and so does the bucket (the map entry
:data:`LAYOUT_SLOT`, read when a slot read finds nothing). A bucket found in another layout,
or with slots that name none (written before slots named their number, 64 of them), is
read whole, its keys moved to their slots in this one and the old slots rewritten or
removed, in the same micro-batch's state commit.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle

from riverbed.pipelines.operators.json_rows import read_state, state_text

__all__ = [
    "BUCKET",
    "BUCKETS",
    "LAYOUT",
    "LAYOUT_SLOT",
    "PAGE_MS",
    "PREFETCH_FRACTION",
    "SLOTS",
    "KeyedStates",
    "bucket_of",
    "keep_log_timer",
    "read_slot",
    "round_up",
    "slot_text",
]

BUCKETS = 64
"""Buckets per operator: enough to spread over any sensible number of shuffle partitions,
few enough that the per-bucket cost stays small in a small micro-batch."""
SLOTS = 16
"""Slots per bucket (module docstring): few and large. A state call cost about 340 µs plus
11.5 ns a byte written on the AMD machine (``benchmarks/tws_state_calls.py``,
BENCHMARKS.md), and a large micro-batch rewrites nearly every slot: ``fraud_alerts``' 14 MiB
of matchers are 4,096 writes a batch as 64 slots a bucket, 1,024 as 16. Its throughput did
not change measurably (the wait for a state call overlaps other work), but its batches at
2,000 payments/s took 3.9 s instead of 4.5 (with :meth:`KeyedStates.expect`). A batch that
touches a few keys writes a few slots of about 14 KiB instead of 3.6."""
PAGE_MS = 60_000
"""The event time a page covers, or one listed time when ``resolution_ms`` is longer: a
page holds every key listed in it, and is written whole when one is added, so a page of
many times of many keys (an hour of search ids) would cost more than it saves."""
PREFETCH_FRACTION = 0.25
"""A call that reads at least this many keys per slot reads the whole bucket at once
(:meth:`KeyedStates.expect`): k keys touch about ``1 - exp(-k / slots)`` of the slots, 22%
for a quarter as many keys as slots, and the one iteration costs about as much as a few
``getValue`` calls."""
LAYOUT = "#"
"""What starts a slot's text, before the number of slots it names (``#16``); the entry
that named it in a slot written as one JSON object."""
LAYOUT_SLOT = -1
"""The map state entry that names the bucket's number of slots, for a read of an empty
slot: a slot of no keys (``#16``), so that every entry of the map is a slot."""
BUCKET = "bucket"
"""The grouping column :func:`bucket_of` is usually given as."""


def bucket_of(*columns: str | Column, buckets: int = BUCKETS) -> Column:
    """The bucket (``0 <= b < buckets``) of the key made of ``columns``: their 64-bit xxHash
    modulo ``buckets`` (a null key has a bucket too; the processor skips it)."""
    return F.pmod(F.xxhash64(*columns), F.lit(buckets)).cast("int")


def round_up(ms: int, resolution_ms: int) -> int:
    """``ms`` rounded up to a multiple of ``resolution_ms``."""
    return -(-ms // resolution_ms) * resolution_ms


def keep_log_timer(
    handle: StatefulProcessorHandle, at: int | None, *, watermark_ms: int, after_input: bool
) -> None:
    """Keep a bucket's timer for a log of its own (an operator's state beside the keys'
    states, with its earliest time ``at``; None: nothing in it) once the log has changed.
    After the input, a timer at or below the watermark has been handled in the call (the
    log's, and the keys' swept by :meth:`KeyedStates.due_now`): deleted, so that it does
    not fire for nothing."""
    registered = {int(t) for t in handle.listTimers()}
    if after_input:
        for t in sorted(t for t in registered if t <= watermark_ms):
            handle.deleteTimer(t)
    if at is not None and at not in registered:
        handle.registerTimer(at)


def _listed(entry: list[Any]) -> int | None:
    """The time a key's slot entry is listed under: ``[state, time]``; ``[state]`` (or
    ``[state, null]``, as written before 2026-11-28) when it is listed nowhere."""
    return entry[1] if len(entry) > 1 else None


Entry = list[Any] | str
"""A key's entry in a cached slot: ``[state]`` or ``[state, listed time]``, or that entry's
JSON text, not yet parsed (module docstring, "A slot's text")."""
SlotEntries = dict[str, Entry]
_QUOTED = "\x00"
"""Ends the layout line of a slot whose keys are each written as a JSON string after it (a
slot with a key that holds a tab or a line break)."""


def read_slot(text: str) -> tuple[SlotEntries, int | None]:
    """A slot's entries (a key's still as text when the slot is in lines) and the number of
    slots it names (None: none), from the text :func:`slot_text` wrote (module docstring,
    "A slot's text") or one JSON object of keys' entries, as written before."""
    if text[:1] != LAYOUT:
        entries = read_state(text)
        return entries, entries.pop(LAYOUT, None)
    header, *lines = text.split("\n")
    lazy: SlotEntries = dict(line.split("\t", 1) for line in lines)  # type: ignore[assignment]
    if header[-1] == _QUOTED:
        lazy = {json.loads(key[1:]): entry for key, entry in lazy.items()}
        header = header[:-1]
    return lazy, int(header[1:])


def slot_text(entries: SlotEntries, slots: int, *, parsed: bool = False) -> str:
    """The text of a slot of ``entries`` in a layout of ``slots`` (:func:`read_slot` reads
    it); ``parsed`` as :func:`~riverbed.pipelines.operators.json_rows.state_text` takes it."""
    quote = any("\t" in key or "\n" in key for key in entries)
    lines = [f"{LAYOUT}{slots}{_QUOTED if quote else ''}"]
    for key, entry in entries.items():
        name = f"{_QUOTED}{json.dumps(key)}" if quote else key
        text = entry if entry.__class__ is str else state_text(entry, parsed=parsed)
        lines.append(f"{name}\t{text}")
    return "\n".join(lines)


class KeyedStates:
    """Per-key states within a bucket (module docstring): map states ``name`` (slot → its
    keys' entries, :func:`slot_text`: ``[state, listed time]``, or ``[state]`` for a key
    listed nowhere, so no ``null`` that
    :func:`~riverbed.pipelines.operators.json_rows.state_text` would have to check) and,
    with ``resolution_ms``, ``name_due`` (time → the keys listed under it) and the value
    state ``name_timer`` (the bucket's earliest timer).

    ``parsed``: the operator vouches that every float in its keys' states was read from
    JSON, none computed (:func:`~riverbed.pipelines.operators.json_rows.state_text`).

    Reads go through a cache of the slots; call :meth:`flush` at the end of every
    ``handleInputRows`` and ``handleExpiredTimer``: it writes the slots changed and the
    time → keys lists, and keeps the bucket's timer at the earliest listed time."""

    def __init__(
        self,
        handle: StatefulProcessorHandle,
        name: str,
        *,
        resolution_ms: int | None = None,
        slots: int = SLOTS,
        parsed: bool = False,
    ) -> None:
        self._handle = handle
        self._parsed = parsed
        self._slots_state = handle.getMapState(name, "slot INT", "keys STRING")
        self._resolution = resolution_ms
        self._slot_count = slots
        if resolution_ms is None:
            self._due = self._timer = None
        else:
            self._due = handle.getMapState(f"{name}_due", "at LONG", "keys STRING")
            self._timer = handle.getValueState(f"{name}_timer", "at LONG")
        self._page_ms = (resolution_ms or 1) * max(1, PAGE_MS // (resolution_ms or 1))
        self._slots: dict[int, SlotEntries] = {}
        self._layout_known = False
        """Whether this call has seen that the bucket is in this layout (module docstring,
        "Layout"): a slot read named it, or the bucket was read whole."""
        self._write_layout = False
        """Whether :meth:`flush` writes :data:`LAYOUT_SLOT` (the bucket was new, or moved to
        this layout)."""
        self._dirty: set[int] = set()
        self._pending: dict[int, set[str]] = {}
        self._swept: list[int] | None = None
        """After :meth:`due`: the times still listed (the bucket's timer has fired)."""
        self._expired: int | None = None
        """After :meth:`due_now`: the watermark at or below which the bucket's registered
        timers are to be deleted (swept before they fired)."""
        self._read: dict[str, list[Any]] = {}
        """The entries parsed from the slots' texts (module docstring, "A slot's text"),
        by key."""
        self._last: tuple[str | None, tuple[int, SlotEntries]] = (None, (0, {}))
        """The last key whose slot was found in the cache, and the slot (cleared at
        :meth:`flush`, with the cache)."""

    def _slot_of(self, key: str) -> int:
        return zlib.crc32(key.encode()) % self._slot_count

    def _slot(self, key: str) -> tuple[int, SlotEntries]:
        if key == self._last[0]:  # an operator reads a key and then writes it
            return self._last[1]
        slot = self._slot_of(key)
        entries = self._slots.get(slot)
        if entries is None:
            entries = self._read_slot(slot)
        self._last = key, (slot, entries)
        return slot, entries

    def _entry(self, entries: SlotEntries, key: str) -> list[Any] | None:
        """The key's entry in its cached slot ``entries``, parsed once if it is text."""
        entry = entries.get(key)
        if entry.__class__ is not str:
            return entry  # type: ignore[return-value]
        parsed = self._read.get(key)
        if parsed is None:
            parsed = self._read[key] = read_state(entry)
        return parsed

    def _read_slot(self, slot: int) -> SlotEntries:
        """A slot not in the cache, read into it."""
        stored = self._slots_state.getValue((slot,))
        entries = None
        if stored is not None:
            entries, named = self._loaded(stored[0])
            if named:
                self._layout_known = True
                self._slots[slot] = entries
                return entries
        if not self._layout_known:
            self._check_layout(stored is None)
        return self._slots.setdefault(slot, {} if entries is None else entries)

    def _check_layout(self, empty_read: bool) -> None:
        """A slot read was empty, or did not name this layout: read the bucket whole if it
        is in another one (or new), to move its keys (module docstring, "Layout")."""
        if empty_read:
            stored = self._slots_state.getValue((LAYOUT_SLOT,))
            if stored is not None and self._loaded(stored[0])[1]:
                self._layout_known = True
                return
        self.prefetch()

    def _loaded(self, text: str) -> tuple[SlotEntries, bool]:
        """A slot's keys read from its text, and whether it names this layout."""
        entries, slots = read_slot(text)
        return entries, slots == self._slot_count

    def expect(self, keys: int) -> None:
        """The call is about to read ``keys`` keys' states: when that many keys would touch
        most slots (:data:`PREFETCH_FRACTION`), read every slot of the bucket now, with one
        iteration of the map state (module docstring, "Reading a bucket at once")."""
        if len(self._slots) < self._slot_count and keys >= self._slot_count * PREFETCH_FRACTION:
            self.prefetch()

    def prefetch(self) -> None:
        """Read every slot of the bucket into the cache: one iteration of the map state, a
        round trip per batch of entries, instead of a ``getValue`` per slot."""
        stored = {int(slot): text for (slot,), (text,) in self._slots_state.iterator()}
        layout = stored.pop(LAYOUT_SLOT, None)
        if self._layout_known or (layout is not None and self._loaded(layout)[1]):
            for slot, text in stored.items():
                if slot not in self._slots:
                    self._slots[slot] = self._loaded(text)[0]
        else:  # new, or in another layout: the cache is empty (the first read found that)
            self._relayout(stored)
        self._layout_known = True
        for slot in range(self._slot_count):
            self._slots.setdefault(slot, {})

    def _relayout(self, stored: dict[int, str]) -> None:
        """Move the keys of the slots ``stored`` (all the bucket's, in another layout) to
        their slots in this one: each old slot is rewritten or removed at :meth:`flush`."""
        for slot, text in stored.items():
            for key, entry in self._loaded(text)[0].items():
                self._slots.setdefault(self._slot_of(key), {})[key] = entry
            self._dirty.add(slot)
        self._dirty.update(self._slots)
        self._write_layout = True

    def get(self, key: str) -> Any:
        """The key's state (JSON-able data), or None. A state changed in place is kept only
        if it is :meth:`put` again: a key not put is written back as it was read."""
        entry = self._entry(self._slot(key)[1], key)
        return None if entry is None else entry[0]

    def put(self, key: str, state: Any, *, due_ms: int | None = None) -> None:
        """Store the key's state (JSON-able, not None), handled again once the watermark
        passes ``due_ms`` (None: no expiry)."""
        slot, entries = self._slot(key)
        at = None
        if due_ms is not None:
            if self._resolution is None:
                raise ValueError("these states have no timers (no resolution_ms)")
            at = round_up(due_ms, self._resolution)
            old = self._entry(entries, key)
            if old is None or _listed(old) != at:
                self._pending.setdefault(at, set()).add(key)
        entries[key] = [state] if at is None else [state, at]
        self._dirty.add(slot)

    def remove(self, key: str) -> None:
        slot, entries = self._slot(key)
        if entries.pop(key, None) is not None:
            self._dirty.add(slot)

    def due(self, watermark_ms: int) -> list[tuple[str, Any]]:
        """From ``handleExpiredTimer``: the keys listed under the times the watermark has
        reached, with their states; those lists are removed, so each key must be
        :meth:`put` again or removed. A later timer of the bucket in the same batch finds
        nothing more."""
        if self._due is None:
            raise ValueError("these states have no timers (no resolution_ms)")
        pages = sorted(int(k[0]) for k in self._due.keys())  # noqa: SIM118 (a MapState)
        waiting = []
        later = [page for page in pages if page > watermark_ms]  # each lists nothing before it
        passed = {page: self._read_page(page) for page in pages if page <= watermark_ms}
        self.expect(sum(len(keys) for listed in passed.values() for keys in listed.values()))
        for page, listed in passed.items():
            kept = {}
            for at, keys in sorted(listed.items()):
                if at > watermark_ms:
                    kept[at] = keys
                    continue
                for key in keys:
                    slot, entries = self._slot(key)
                    entry = self._entry(entries, key)
                    if entry is not None and _listed(entry) == at:
                        entries[key] = entry[:1]  # no longer listed anywhere
                        self._dirty.add(slot)
                        waiting.append((key, entry[0]))
            self._write_page(page, kept)
            later += kept
        self._swept = later
        return waiting

    def due_now(self, watermark_ms: int) -> list[tuple[str, Any]]:
        """From ``handleInputRows``: :meth:`due`, if the bucket's timer has come (its
        earliest listed time is at or below the watermark), else nothing. The timer is then
        deleted at :meth:`flush`, so it does not fire after the batch's input: the keys due
        are handled while the slots the input read are in the cache, and each slot is read
        and written once per batch, not once for the input and again for the timer."""
        if self._timer is None:
            raise ValueError("these states have no timers (no resolution_ms)")
        stored = self._timer.get()
        if stored is None or int(stored[0]) > watermark_ms:
            return []
        self._expired = watermark_ms
        return self.due(watermark_ms)

    def _read_page(self, page: int) -> dict[int, list[str]]:
        assert self._due is not None
        stored = self._due.getValue((page,))
        if stored is None:
            return {}
        listed = read_state(stored[0])
        if isinstance(listed, list):  # one time's list, as kept before pages
            return {page: listed}
        return {int(at): keys for at, keys in listed.items()}

    def _write_page(self, page: int, listed: dict[int, list[str]]) -> None:
        assert self._due is not None
        if listed:
            text = state_text({str(at): keys for at, keys in sorted(listed.items())})
            self._due.updateValue((page,), (text,))
        else:
            self._due.removeKey((page,))

    def flush(self) -> None:
        """Write the slots and the time → keys lists changed since the last flush; keep
        the bucket's timer at the earliest listed time; forget the cache (the next call
        may be another bucket's)."""
        for slot in sorted(self._dirty):
            entries = self._slots.get(slot)  # None: a slot of another layout, moved
            if entries:
                text = slot_text(entries, self._slot_count, parsed=self._parsed)
                self._slots_state.updateValue((slot,), (text,))
            else:
                self._slots_state.removeKey((slot,))
        if self._write_layout and self._dirty:
            layout = slot_text({}, self._slot_count)
            self._slots_state.updateValue((LAYOUT_SLOT,), (layout,))
        if self._due is not None and self._timer is not None:
            by_page: dict[int, dict[int, set[str]]] = {}
            for at, keys in self._pending.items():
                by_page.setdefault(at - at % self._page_ms, {})[at] = keys
            for page, times in sorted(by_page.items()):
                listed = self._read_page(page)
                for at, keys in times.items():
                    listed[at] = sorted(keys.union(listed.get(at, ())))
                self._write_page(page, listed)
            self._keep_timer()
        self._slots.clear()
        self._read.clear()
        self._last = (None, (0, {}))
        self._layout_known = self._write_layout = False
        self._dirty.clear()
        self._pending.clear()
        self._swept = None
        self._expired = None

    def _keep_timer(self) -> None:
        assert self._timer is not None
        listed = list(self._pending)
        if self._swept is None:  # the timer is as the last flush left it
            if not listed:
                return
            stored = self._timer.get()
            current = None if stored is None else int(stored[0])
            if current is not None and current <= min(listed):
                return
            registered: set[int] = set()
        else:  # the timer has fired, or its keys were swept before (due_now)
            listed += self._swept
            registered = {int(t) for t in self._handle.listTimers()}
            if self._expired is not None:  # swept before it fired: it must not fire now
                for at in sorted(t for t in registered if t <= self._expired):
                    self._handle.deleteTimer(at)
                registered = {t for t in registered if t > self._expired}
            if not listed:
                self._timer.clear()
                return
        earliest = min(listed)
        if earliest not in registered:
            self._handle.registerTimer(earliest)
        self._timer.update((earliest,))
