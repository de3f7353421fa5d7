"""In-memory stand-ins for what PySpark hands a ``transformWithStateInPandas`` processor:
map and value states and event-time timers, one grouping key's (a bucket's) at a time.

They behave as Spark's do for what riverbed's operators use (``getValue``, ``updateValue``,
``removeKey``, ``keys``, ``iterator``; ``exists``, ``get``, ``update``, ``clear``;
``listTimers``, ``registerTimer``, ``deleteTimer``), count the state calls, and fire timers
as Spark does (:meth:`MemoryHandle.fire`); :class:`Watermark` stands for the
``TimerValues`` and ``ExpiredTimerInfo`` of a call. Unit tests of the operators' state
layout use them, and so do ``benchmarks/pattern_operator.py`` and
``benchmarks/changelog_join_operator.py``, which measure operators' Python cost without
Spark.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["MemoryHandle", "MemoryMapState", "MemoryValueState", "Watermark"]


class MemoryMapState:
    def __init__(self) -> None:
        self.entries: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self.calls = 0

    def getValue(self, key: tuple[Any, ...]) -> tuple[Any, ...] | None:
        self.calls += 1
        return self.entries.get(key)

    def updateValue(self, key: tuple[Any, ...], value: tuple[Any, ...]) -> None:
        self.calls += 1
        self.entries[key] = value

    def removeKey(self, key: tuple[Any, ...]) -> None:
        self.calls += 1
        self.entries.pop(key, None)

    def keys(self) -> Iterator[tuple[Any, ...]]:
        self.calls += 1
        return iter(list(self.entries))

    def iterator(self) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        self.calls += 1  # PySpark fetches the entries in batches: a call or a few
        return iter(list(self.entries.items()))


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
