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

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["IntervalJoinState", "JoinInterval", "Joined", "LeftRow", "RightRow"]


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


@dataclass(frozen=True, slots=True, kw_only=True)
class RightRow:
    ts: int
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Joined:
    """A joined pair; ``first`` when it is the left row's first match."""

    left: LeftRow
    right: RightRow
    first: bool


@dataclass(slots=True)
class IntervalJoinState:
    """One key's rows waiting for partners (module docstring)."""

    lefts: dict[str, LeftRow] = field(default_factory=dict)
    rights: list[RightRow] = field(default_factory=list)

    def add(
        self,
        condition: JoinInterval,
        *,
        lefts: Iterable[LeftRow] = (),
        rights: Iterable[RightRow] = (),
    ) -> tuple[list[LeftRow], list[Joined]]:
        """Add one batch's rows: (the new left rows, the pairs joined)."""
        new_lefts: list[LeftRow] = []
        for left in lefts:
            if left.id in self.lefts:
                continue  # a duplicate
            self.lefts[left.id] = left
            new_lefts.append(left)
        new_rights = list(rights)
        self.rights.extend(new_rights)
        joined: list[Joined] = []
        # every new pair has a new row on one side: new lefts with all rights, then the old
        # lefts with the new rights
        new_ids = {left.id for left in new_lefts}
        for left in new_lefts:
            joined.extend(self._join(condition, left, self.rights))
        for left in self.lefts.values():
            if left.id not in new_ids:
                joined.extend(self._join(condition, left, new_rights))
        return new_lefts, joined

    @staticmethod
    def _join(condition: JoinInterval, left: LeftRow, rights: Iterable[RightRow]) -> list[Joined]:
        pairs = []
        for right in rights:
            if condition.joins(left.ts, right.ts):
                pairs.append(Joined(left=left, right=right, first=not left.matched))
                left.matched = True
        return pairs

    def expire(self, condition: JoinInterval, watermark_ms: int) -> list[LeftRow]:
        """Drop what no on-time row can join any more; returns the left rows that expired."""
        expired = [
            left for left in self.lefts.values() if condition.left_expiry(left.ts) <= watermark_ms
        ]
        for left in expired:
            del self.lefts[left.id]
        self.rights = [r for r in self.rights if condition.right_expiry(r.ts) > watermark_ms]
        return expired

    def next_expiry_ms(self, condition: JoinInterval) -> int | None:
        """The smallest watermark at which :meth:`expire` has something to do, if any."""
        times = [condition.left_expiry(left.ts) for left in self.lefts.values()]
        times += [condition.right_expiry(right.ts) for right in self.rights]
        return min(times, default=None)

    def is_empty(self) -> bool:
        return not self.lefts and not self.rights

    def to_obj(self) -> dict[str, Any]:
        """The state as JSON-able data (:meth:`from_obj` reads it back)."""
        return {
            "v": 1,
            "lefts": [[x.id, x.ts, x.fields, x.matched] for x in self.lefts.values()],
            "rights": [[x.ts, x.fields] for x in self.rights],
        }

    @classmethod
    def from_obj(cls, data: Any) -> IntervalJoinState:
        if not isinstance(data, dict) or data.get("v") != 1:
            raise ValueError("not an interval join state of version 1")
        lefts = {
            i: LeftRow(id=i, ts=ts, fields=fields, matched=matched)
            for i, ts, fields, matched in data["lefts"]
        }
        rights = [RightRow(ts=ts, fields=fields) for ts, fields in data["rights"]]
        return cls(lefts, rights)

    def to_json(self) -> str:
        return json.dumps(self.to_obj(), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> IntervalJoinState:
        return cls.from_obj(json.loads(text))
