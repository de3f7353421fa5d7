"""CDC changelogs as tables: parsing change records and applying them idempotently (pure logic).

The input is a CDC topic in riverbed's format (DESIGN.md, "Topics, formats and time";
:mod:`riverbed.cdc.envelope`): the key is the JSON object of the primary-key columns, the
value Debezium's envelope ``{"before", "after", "op", "ts_ms", "source": {..., "lsn",
"commitLsn", "ts_ms"}}`` with schemas disabled, and each delete is followed by a
*tombstone* (the same key, a null value). Nothing here knows Spark; the operators call it
from their stateful processors, and the tests call it directly.

- **Parsing.** :func:`parse_change` turns one record into a :class:`Change`, or raises
  :class:`MalformedChange` (a ``ValueError``) saying what is wrong: never another
  exception, never None. The Spark operators leave such records out.
- **Positions.** A change's :class:`SourcePosition` is ``(source.commitLsn, source.lsn)``;
  each change of a row has a larger one than the row's earlier changes (the commit LSN
  comes first: a transaction that began before another can commit after it with smaller
  change LSNs). LSNs are accepted as JSON numbers (what riverbed's capture writes; the
  trigger-based capture's audit ids) or as PostgreSQL's text form ``"0/16B3748"`` (read as
  ``(0x0 << 32) + 0x16B3748``). A missing or null ``commitLsn`` falls back to ``lsn``.
- **Idempotence** (README, "Deduplicating downstream"): per key, a change applies only if
  its position is greater than that of the last change applied to the key, so a replayed
  change does nothing. Snapshot rows (``op: r``) always apply, and their position becomes
  the key's: a snapshot row is the row as of the snapshot's position (the slot's
  consistent point, or 0 for the trigger-based capture), and every change streamed after
  the snapshot has a larger one. Replaying a log from (or across) its snapshot therefore
  ends in the same state; a snapshot row replayed on its own takes its key back to the
  snapshot until the later changes are replayed too.
- **Tombstones** carry no position: a tombstone goes with the delete right before it
  (per key). It is ignored when that delete was ignored as a replay. When no delete came
  right before it (compaction keeps only the last record of a key, so a reader can see a
  tombstone whose delete is gone) it deletes the row and forgets the key's position,
  which is unknown but greater than the row's: whatever follows a tombstone in the log is
  newer. The one case this cannot tell apart: a replayed delete followed directly, because
  compaction removed the records in between, by a later delete's tombstone; the key keeps
  its row until its next change. It takes a duplicate *and* a compaction of the records
  right after it before the reader reaches them.
- **Key changes** arrive as a delete of the old key (and its tombstone) and a create of
  the new one, and need nothing special. **Truncates** (``op: t``, keyed ``{}``) delete
  every row whose position is below the truncate's (:meth:`Table.apply`); an operator
  that keeps one state per key sees them only in the group of key ``{}``.
- **Large values.** An update that leaves a TOASTed column unchanged may carry Debezium's
  placeholder :data:`UNAVAILABLE_VALUE`; as Debezium's consumers do, the previous value
  is kept.

State: a key's :class:`RowState` (and a whole :class:`Table`) round-trips through a JSON
string (``to_json`` / ``from_json``), the form Spark's state store keeps. A deleted key
keeps its state (its position, a few bytes) so that replays of its earlier changes stay
ignored. Changes of one key must be applied in log order: the Spark operators sort a
group's rows by offset, as Spark does not keep the order of the rows of a group.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from riverbed.pipelines.operators.json_rows import Json, Row, dumps, json_text, loads

__all__ = [
    "UNAVAILABLE_VALUE",
    "Change",
    "MalformedChange",
    "Op",
    "RowState",
    "SourcePosition",
    "Table",
    "lsn_of",
    "parse_change",
]

UNAVAILABLE_VALUE = "__debezium_unavailable_value"
"""Debezium's ``unavailable.value.placeholder`` default (also riverbed.cdc.envelope's)."""


class MalformedChange(ValueError):
    """A record that is not a change event of the contract: the producer's fault."""


class Op(enum.Enum):
    CREATE = "c"
    UPDATE = "u"
    DELETE = "d"
    READ = "r"
    """A snapshot row."""
    TRUNCATE = "t"
    TOMBSTONE = "tombstone"
    """Not an envelope op: a record with a null value (after a delete)."""


_ENVELOPE_OPS = {op.value: op for op in Op if op is not Op.TOMBSTONE}
_UPSERTS = frozenset({Op.CREATE, Op.UPDATE, Op.READ})


class SourcePosition(NamedTuple):
    """``(source.commitLsn, source.lsn)``: per key, it grows with every change."""

    commit_lsn: int
    lsn: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """One record of a CDC topic."""

    key: Row
    """The record key: the primary-key columns (``{}`` for a truncate)."""
    op: Op
    before: Row | None
    after: Row | None
    ts_ms: int | None
    """``source.ts_ms``, the commit time: the time of the change (None for a tombstone)."""
    position: SourcePosition | None
    """None for a tombstone."""


_LSN_TEXT = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")


def lsn_of(value: Json) -> int:
    """An LSN from its JSON form: a non-negative integer, or PostgreSQL's ``"X/Y"`` (hex)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and (match := _LSN_TEXT.fullmatch(value)):
        return (int(match[1], 16) << 32) + int(match[2], 16)
    raise MalformedChange(f"not an LSN: {value!r:.80}")


def parse_change(key: str | bytes | None, value: str | bytes | None) -> Change:
    """The change in one CDC record (a null ``value`` is a tombstone), or MalformedChange."""
    key_row = _row(_loads(key, "key"), "the key")
    if key_row is None:
        raise MalformedChange("a record without a key")
    if value is None:
        return Change(key=key_row, op=Op.TOMBSTONE, before=None, after=None, ts_ms=None,
                      position=None)  # fmt: skip
    envelope = _loads(value, "value")
    if not isinstance(envelope, dict):
        raise MalformedChange(f"the value is not a JSON object: {value!r:.80}")
    op_text = envelope.get("op")
    op = _ENVELOPE_OPS.get(op_text) if isinstance(op_text, str) else None
    if op is None:
        raise MalformedChange(f"unknown op {op_text!r:.40}")
    source = envelope.get("source")
    if not isinstance(source, dict):
        raise MalformedChange("no source block")
    ts_ms = source.get("ts_ms")
    if not isinstance(ts_ms, int) or isinstance(ts_ms, bool):
        raise MalformedChange(f"source.ts_ms is not an integer: {ts_ms!r:.40}")
    lsn = lsn_of(source.get("lsn"))
    commit = source.get("commitLsn")
    position = SourcePosition(lsn if commit is None else lsn_of(commit), lsn)
    if "before" not in envelope or "after" not in envelope:
        raise MalformedChange("the envelope lacks before or after")
    before, after = _row(envelope["before"], "before"), _row(envelope["after"], "after")
    if op in _UPSERTS and after is None:
        raise MalformedChange(f"op {op.value} without an after row")
    if op in (Op.DELETE, Op.TRUNCATE) and after is not None:
        raise MalformedChange(f"op {op.value} with an after row")
    return Change(key=key_row, op=op, before=before, after=after, ts_ms=ts_ms, position=position)


def _loads(data: str | bytes | None, what: str) -> Json:
    if data is None:
        return None
    try:
        return loads(data)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise MalformedChange(f"the {what} is not JSON: {e}") from None


def _row(value: Json, what: str) -> Row | None:
    if value is None or isinstance(value, dict):
        return value
    raise MalformedChange(f"{what} is not a JSON object: {value!r:.80}")


def _merged(previous: Row | None, after: Row) -> Row:
    """``after`` with placeholders replaced by the previous values (module docstring)."""
    if previous is None or UNAVAILABLE_VALUE not in after.values():
        return after
    return {
        name: previous.get(name, value) if value == UNAVAILABLE_VALUE else value
        for name, value in after.items()
    }


@dataclass(slots=True)
class RowState:
    """One key's state: its row (None: absent or deleted) and the position of the last
    change applied to it."""

    row: Row | None = None
    position: SourcePosition | None = None
    """None: no change applied yet, or forgotten by a tombstone (module docstring)."""
    skipped_delete: bool = False
    """The last record seen was a delete ignored as a replay (so is the tombstone right
    after it)."""

    def apply(self, change: Change) -> bool:
        """Apply one change of this key: False if it was ignored (a replay, a tombstone
        whose delete was ignored or already applied)."""
        if change.op is Op.TOMBSTONE:
            after_skipped_delete, self.skipped_delete = self.skipped_delete, False
            if after_skipped_delete or self.row is None:
                return False
            self.row, self.position = None, None
            return True
        assert change.position is not None
        if (
            change.op is not Op.READ
            and self.position is not None
            and change.position <= self.position
        ):
            self.skipped_delete = change.op is Op.DELETE
            return False
        self.skipped_delete = False
        self.position = change.position
        if change.op in _UPSERTS:
            assert change.after is not None
            self.row = _merged(self.row, change.after) if change.op is Op.UPDATE else change.after
        else:
            self.row = None
        return True

    def as_json(self) -> Json:
        # the position as a list: orjson writes no NamedTuple, and a state it cannot write
        # is written by json, several times slower (and read back by json too)
        position = None if self.position is None else list(self.position)
        return {"row": self.row, "position": position, "skipped_delete": self.skipped_delete}

    @classmethod
    def from_obj(cls, obj: Json) -> RowState:
        position = obj["position"]
        return cls(
            row=obj["row"],
            position=None if position is None else SourcePosition(*position),
            skipped_delete=obj["skipped_delete"],
        )

    def to_json(self) -> str:
        return dumps(self.as_json())

    @classmethod
    def from_json(cls, text: str) -> RowState:
        """The state that :meth:`to_json` wrote (trusted: it is the operator's own)."""
        return cls.from_obj(loads(text))


class Table:
    """A table materialized from its changelog: one :class:`RowState` per key."""

    def __init__(self, states: Mapping[str, RowState] | None = None) -> None:
        self._states: dict[str, RowState] = dict(states or {})

    def apply(self, change: Change) -> bool:
        """Apply one record (module docstring); False if it changed nothing."""
        if change.op is Op.TRUNCATE:
            applied = [state.apply(change) for state in self._states.values()]
            return any(applied)
        name = json_text(change.key)
        state = self._states.get(name)
        if state is None:
            state = self._states[name] = RowState()
        return state.apply(change)

    def get(self, key: Row) -> Row | None:
        state = self._states.get(json_text(key))
        return None if state is None else state.row

    def state(self, key: Row) -> RowState | None:
        return self._states.get(json_text(key))

    def rows(self) -> Iterator[tuple[Row, Row]]:
        """(key, row) of every row present."""
        for name, state in self._states.items():
            if state.row is not None:
                yield loads(name), state.row

    def __len__(self) -> int:
        return sum(state.row is not None for state in self._states.values())

    def to_json(self) -> str:
        return dumps({name: state.as_json() for name, state in self._states.items()})

    @classmethod
    def from_json(cls, text: str) -> Table:
        return cls({name: RowState.from_obj(obj) for name, obj in loads(text).items()})
