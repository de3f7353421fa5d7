"""In-memory stand-ins for what PySpark hands a ``transformWithStateInPandas`` processor:
map and value states and event-time timers, one grouping key's (a bucket's) at a time.

They behave as Spark's do for what riverbed's operators use (``getValue``, ``updateValue``,
``removeKey``, ``keys``, ``iterator``; ``exists``, ``get``, ``update``, ``clear``;
``listTimers``, ``registerTimer``, ``deleteTimer``), count the state calls, and fire timers
as Spark does (:meth:`MemoryHandle.fire`); :class:`Watermark` stands for the
``TimerValues`` and ``ExpiredTimerInfo`` of a call; :class:`OperatorRun` calls an operator
over micro-batches as Spark would. Unit tests of the operators' state
layout use them, and so do ``benchmarks/pattern_operator.py`` and
``benchmarks/changelog_join_operator.py``, which measure operators' Python cost without
Spark.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

__all__ = [
    "MemoryHandle",
    "MemoryMapState",
    "MemoryValueState",
    "OperatorRun",
    "Watermark",
    "map_state_bytes",
]


class MemoryMapState:
    def __init__(self) -> None:
        self.entries: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self.calls = 0
        self.read = self.written = 0
        """The characters of the string values read and written (what a processor sends
        over PySpark's state server socket, near enough)."""

    def getValue(self, key: tuple[Any, ...]) -> tuple[Any, ...] | None:
        self.calls += 1
        value = self.entries.get(key)
        self.read += _chars(value)
        return value

    def updateValue(self, key: tuple[Any, ...], value: tuple[Any, ...]) -> None:
        self.calls += 1
        self.written += _chars(value)
        self.entries[key] = value

    def removeKey(self, key: tuple[Any, ...]) -> None:
        self.calls += 1
        self.entries.pop(key, None)

    def keys(self) -> Iterator[tuple[Any, ...]]:
        self.calls += 1
        return iter(list(self.entries))

    def iterator(self) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        self.calls += 1  # PySpark fetches the entries in batches: a call or a few
        self.read += sum(map(_chars, self.entries.values()))
        return iter(list(self.entries.items()))


def _chars(value: tuple[Any, ...] | None) -> int:
    return 0 if value is None else sum(len(v) for v in value if isinstance(v, str))


class MemoryValueState:
    def __init__(self) -> None:
        self.value: tuple[Any, ...] | None = None

    def exists(self) -> bool:
        return self.value is not None

    def get(self) -> tuple[Any, ...] | None:
        return self.value

    def update(self, value: tuple[Any, ...]) -> None:
        self.value = value

    def clear(self) -> None:
        self.value = None


class MemoryHandle:
    """One bucket's state: map states by name and the registered timers."""

    def __init__(self) -> None:
        self.maps: dict[str, MemoryMapState] = {}
        self.values: dict[str, MemoryValueState] = {}
        self.timers: set[int] = set()
        self.registrations = 0

    def getMapState(self, name: str, key_schema: str, value_schema: str) -> MemoryMapState:
        return self.maps.setdefault(name, MemoryMapState())

    def getValueState(self, name: str, schema: str) -> MemoryValueState:
        return self.values.setdefault(name, MemoryValueState())

    def listTimers(self) -> Iterator[int]:
        return iter(sorted(self.timers))

    def registerTimer(self, at: int) -> None:
        self.registrations += 1
        self.timers.add(at)

    def deleteTimer(self, at: int) -> None:
        self.timers.discard(at)

    def fire(self, watermark: int) -> list[int]:
        """The timers due at ``watermark``, in order, removed as Spark removes them."""
        due = sorted(t for t in self.timers if t <= watermark)
        self.timers -= set(due)
        return due


class Watermark:
    """What Spark hands a processor as ``TimerValues`` and ``ExpiredTimerInfo``: the
    batch's watermark, and a fired timer's time."""

    def __init__(self, watermark_ms: int = 0, expiry_ms: int = 0) -> None:
        self.watermark_ms, self.expiry_ms = watermark_ms, expiry_ms

    def getCurrentWatermarkInMs(self) -> int:
        return self.watermark_ms

    def getExpiryTimeInMs(self) -> int:
        return self.expiry_ms


class OperatorRun:
    """One run of a keyed operator over micro-batches without Spark (the operator
    benchmarks, and tests of an operator's output over many batches): a processor made by
    ``make`` and an in-memory state per bucket, as each Python worker would have them,
    called as Spark calls them (each bucket's input, then the timers the batch's watermark
    has reached, bucket by bucket), and the output rows (topic, key, value)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make
        self.processors: dict[int, Any] = {}
        self.handles: dict[int, MemoryHandle] = {}
        self.outputs: list[tuple[str, str, str]] = []

    def processor(self, bucket: int) -> Any:
        if bucket not in self.processors:
            processor, handle = self.make(), MemoryHandle()
            processor.init(handle)
            self.processors[bucket], self.handles[bucket] = processor, handle
        return self.processors[bucket]

    def __call__(self, work: Sequence[tuple[int, dict[int, Any]]]) -> None:
        """Run ``work``: per micro-batch, its watermark and each bucket's input frame."""
        for watermark, frames in work:
            for bucket, frame in frames.items():
                calls = self.processor(bucket).handleInputRows(
                    (bucket,), iter([frame]), Watermark(watermark)
                )
                self._collect(calls)
            for bucket, handle in self.handles.items():
                for at in handle.fire(watermark):
                    calls = self.processors[bucket].handleExpiredTimer(
                        (bucket,), Watermark(watermark), Watermark(watermark, at)
                    )
                    self._collect(calls)

    def _collect(self, frames: Any) -> None:
        for frame in frames:
            self.outputs += frame.itertuples(index=False, name=None)

    def state_bytes(self) -> int:
        """The text of the operator's map states, all buckets."""
        return map_state_bytes(self.handles.values())

    def state_traffic(self) -> tuple[int, int]:
        """The characters of the map states' values read and written, all buckets."""
        states = [state for handle in self.handles.values() for state in handle.maps.values()]
        return sum(s.read for s in states), sum(s.written for s in states)


def map_state_bytes(handles: Iterable[Any]) -> int:
    """The text of the map states of in-memory handles (``riverbed.testing.memory_states``)."""
    return sum(
        len(value[0])
        for handle in handles
        for state in handle.maps.values()
        for value in state.entries.values()
    )
