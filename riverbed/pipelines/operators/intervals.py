"""Interval join: the pure logic of a stream-stream join on a key and a time bound.

A *left* row (e.g. a search) and a *right* row (a click on it) of the same key join when
``lower_ms <= right.ts - left.ts <= upper_ms`` (e.g. 0 and 10 minutes). Both
sides arrive in any order, so each side waits in the state for the rows of the other side
that may still come; the watermark ``W`` (no on-time row has ``ts < W``) says when that
wait is over:

- a left row can match right rows up to ``left.ts + upper_ms``; once ``W`` is past that,
  no on-time right row can match it: it *expires* (and is reported, with whether it ever
  matched: an outer join's unmatched rows, or a semi-join's answer);
- a right row can match left rows from ``right.ts - upper_ms`` to ``right.ts - lower_ms``;
  once ``W`` is past ``right.ts - lower_ms``, no on-time left row can match it: it is
  dropped.

Rows that arrive late (``ts < W``) are still joined with what the state holds; what has
expired is gone, so a late row may miss a partner that came in time (the caller documents
it). A left row's id (e.g. a ``search_id``) is its identity: a second left row with the
same id is a duplicate and is ignored while the first is held; right rows are not
deduplicated.

:class:`JoinInterval` is the condition; :class:`IntervalJoinState` is one key's state; it
round-trips through a JSON string (a Spark state store value). Nothing here knows Spark:
:mod:`riverbed.pipelines.operators.interval_join` wraps it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from riverbed.pipelines.operators.json_rows import read_state, state_text

__all__ = ["STATE_VERSION", "IntervalJoinState", "JoinInterval", "Joined", "LeftRow", "RightRow"]


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinInterval:
    """The join condition ``lower_ms <= right.ts - left.ts <= upper_ms``."""

    lower_ms: int
    upper_ms: int

    def __post_init__(self) -> None:
        if self.lower_ms > self.upper_ms:
            raise ValueError(f"empty interval [{self.lower_ms}, {self.upper_ms}]")

    def joins(self, left_ts: int, right_ts: int) -> bool:
        return self.lower_ms <= right_ts - left_ts <= self.upper_ms

    def left_expiry(self, left_ts: int) -> int:
        """The smallest watermark at which a left row at ``left_ts`` can get no more
        on-time right row."""
        return left_ts + self.upper_ms + 1

    def right_expiry(self, right_ts: int) -> int:
        """The smallest watermark at which a right row at ``right_ts`` can get no more
        on-time left row."""
        return right_ts - self.lower_ms + 1


@dataclass(slots=True, kw_only=True)
class LeftRow:
    id: str
    ts: int
    fields: dict[str, Any]
    matched: bool = False


@dataclass(slots=True, kw_only=True)
class RightRow:
    ts: int
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Joined:
    """A joined pair; ``first`` when it is the left row's first match."""

    left: LeftRow
    right: RightRow
    first: bool


STATE_VERSION = 2
"""The layout of :meth:`IntervalJoinState.to_obj`: ``[2, lefts, rights]``, each left row
``[id, ts, fields, matched]`` and each right row ``[ts, fields]``. Version 1, an object
``{"v": 1, "lefts": ..., "rights": ...}`` of the same rows, is still read."""


@dataclass(slots=True)
class IntervalJoinState:
    """One key's rows waiting for partners (module docstring), held as the lists of its
    JSON form (:data:`STATE_VERSION`): a key's state is read and written in every
    micro-batch that touches it, and is used as read, with no object made for each held
    row and taken apart again at the write. :class:`LeftRow` and :class:`RightRow` objects
    are made only for the rows a caller is given."""

    lefts: list[list[Any]] = field(default_factory=list)
    """``[id, ts, fields, matched]`` per left row, in arrival order."""
    rights: list[list[Any]] = field(default_factory=list)
    """``[ts, fields]`` per right row, in arrival order."""

    def add(
        self,
        condition: JoinInterval,
        *,
        lefts: Iterable[LeftRow] = (),
        rights: Iterable[RightRow] = (),
    ) -> tuple[list[LeftRow], list[Joined]]:
        """Add one batch's rows: (the new left rows, the pairs joined)."""
        held = self.lefts
        old = len(held)
        new_lefts: list[LeftRow] = []
        ids: set[str] | None = None
        for left in lefts:
            if ids is None:
                ids = {entry[0] for entry in held}
            if left.id in ids:
                continue  # a duplicate
            ids.add(left.id)
            held.append([left.id, left.ts, left.fields, left.matched])
            new_lefts.append(left)
        new_rights = list(rights)
        joined: list[Joined] = []
        if not new_rights and not self.rights:
            return new_lefts, joined
        self.rights += [[right.ts, right.fields] for right in new_rights]
        # every new pair has a new row on one side: new lefts with all rights, then the old
        # lefts with the new rights
        for entry, left in zip(held[old:], new_lefts, strict=True):
            for ts, fields in self.rights:
                if condition.joins(left.ts, ts):
                    joined.append(Joined(left=left, right=RightRow(ts=ts, fields=fields),
                                         first=not entry[3]))  # fmt: skip
                    entry[3] = left.matched = True
        for entry in held[:old] if new_rights else ():
            for right in new_rights:
                if condition.joins(entry[1], right.ts):
                    left = LeftRow(id=entry[0], ts=entry[1], fields=entry[2], matched=entry[3])
                    joined.append(Joined(left=left, right=right, first=not entry[3]))
                    entry[3] = True
        return new_lefts, joined

    def expire(self, condition: JoinInterval, watermark_ms: int) -> list[LeftRow]:
        """Drop what no on-time row can join any more; returns the left rows that expired."""
        expired = [
            LeftRow(id=i, ts=ts, fields=fields, matched=matched)
            for i, ts, fields, matched in self.lefts
            if condition.left_expiry(ts) <= watermark_ms
        ]
        if expired:
            self.lefts = [e for e in self.lefts if condition.left_expiry(e[1]) > watermark_ms]
        if any(condition.right_expiry(e[0]) <= watermark_ms for e in self.rights):
            self.rights = [e for e in self.rights if condition.right_expiry(e[0]) > watermark_ms]
        return expired

    def next_expiry_ms(self, condition: JoinInterval) -> int | None:
        """The smallest watermark at which :meth:`expire` has something to do, if any."""
        times = [condition.left_expiry(min(entry[1] for entry in self.lefts))] if self.lefts else []
        if self.rights:
            times.append(condition.right_expiry(min(entry[0] for entry in self.rights)))
        return min(times, default=None)

    def is_empty(self) -> bool:
        return not self.lefts and not self.rights

    def to_obj(self) -> list[Any]:
        """The state as JSON-able data (:data:`STATE_VERSION`; :meth:`from_obj` reads it
        back). It shares the state's lists: write it before the state changes again."""
        return [STATE_VERSION, self.lefts, self.rights]

    @classmethod
    def from_obj(cls, data: Any) -> IntervalJoinState:
        """The state of ``data`` (:meth:`to_obj`), taking its lists as they are."""
        if isinstance(data, list) and len(data) == 3 and data[0] == STATE_VERSION:
            return cls(data[1], data[2])
        if isinstance(data, dict) and data.get("v") == 1:
            return cls([list(entry) for entry in data["lefts"]], [list(e) for e in data["rights"]])
        raise ValueError("not an interval join state of version 1 or 2")

    def to_json(self) -> str:
        return state_text(self.to_obj())

    @classmethod
    def from_json(cls, text: str) -> IntervalJoinState:
        return cls.from_obj(read_state(text))
