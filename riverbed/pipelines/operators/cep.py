"""Complex event processing: patterns over one key's events, matched in event-time order.

The pure logic of a CEP operator in the manner of Flink CEP, for a Spark stateful processor
(``transformWithStateInPandas``) grouped by key (a card, a user): per key it is given the
key's new events in arrival order and the watermark, and it keeps its state as one string.
Nothing here knows Spark or pandas; the tests call it directly.

**Events** are JSON objects (``dict``) with an integer ``ts``, epoch ms. Their *event-time
order* is ``(ts, event[tiebreak_field])``, the tie-break field being the caller's (a payment
id), so that the order, and so the matches, do not depend on the arrival order; events equal
in both are ordered by their JSON text. Events are kept in the state as they are, so they
must be JSON-encodable.

**Patterns.** A :class:`Pattern` is a sequence of steps (:class:`Step`), each a name, a
condition (a predicate on an event; it must be deterministic) and a quantifier: once (the
default), :func:`times`, :func:`at_least` or :func:`between`; every step takes at least one
event. A *match* is a sequence of events, in event-time order, split in order among the
steps, each step getting a number of events its quantifier allows and each event satisfying
its step's condition, such that

- with ``Contiguity.STRICT`` ("next"), no other event of the key comes between two events of
  the match; with ``Contiguity.RELAXED`` ("followed by"), events in between are skipped;
- the last event is at most ``within_ms`` after the first (``last.ts - first.ts <=
  within_ms``; ``within_ms`` is required, it is what bounds the state).

The last step must have a fixed count (once or ``times(n)``): a match is emitted by its last
event and cannot wait for more, so write ``times(3)``, not ``at_least(3)``, at the end.

**Which match, and when.** When the :class:`Matcher` is fed an event that can end a match
and matches ending with it exist, it emits one: the one with the earliest first event (the
longest one within ``within_ms``: the oldest events of a looping first step drop out of the
front as time passes). Among those with the same first event, quantifiers are greedy: at the
first event where two candidates differ, the one that puts that event in a step wins over
one that skips it, and the one that puts it in the earlier step (a looping step taking one
more) wins over the one that moves on. After a match, matching restarts after its last
event: no event up to it becomes part of a later match (as Flink's ``SKIP_PAST_LAST_EVENT``).

**Expiry.** The matcher holds the events that may still become part of a match: those since
the last match (strict: since the last event that satisfies no step's condition, or only a
last step of one event without ending a match; relaxed: only events that satisfy one), at
most ``within_ms`` older than the newest event fed. The events fed next are not older than
the watermark ``W``, so no held event older than ``W - within_ms`` can be in a future
match: :meth:`Matcher.expire` drops them, and :meth:`Matcher.next_expiry_ms` says for which
watermark to call it next (a timer).

**Order and lateness.** An :class:`EventTimeBuffer` holds events until the watermark has
passed them (``ts < watermark``: an event at the watermark may still be followed by one with
the same ``ts`` and a smaller tie-break) and then releases them in event-time order. An event
that arrives with ``ts`` below the watermark is *late*: it is returned apart, for the caller
to send to a side output; it is never fed to the matcher. :class:`OrderedMatcher` is the two
together, the whole state of one key.

**Early matches.** Matching in event-time order waits for the watermark. Asked to
(``advance(..., early=True)``), :class:`OrderedMatcher` also gives each match that the events
it has so far complete, before the watermark passes them: it feeds a copy of its matcher the
held events, as the watermark will release them. What it gave early and how that stands is
part of its state. A later event can change such a match (a decline that arrived late
counts too) or undo it (an approval arrived late in between), so each call says which early
matches are new or changed and which are withdrawn; when the watermark passes a match's
last event, the match found then settles it (given again only if it differs). So the early
matches given and not withdrawn, with the settled ones, are always the matches of every
event that was not late, in event-time order: a changelog of them ends at the matches that
waiting would have given.

**State.** ``to_state()`` is a JSON string, ``{"v": 1, ...}`` (:class:`OrderedMatcher`'s, a
list of version 4 or 3); ``from_state`` reads it back given the same configuration. It holds
events and times only: the pattern is code, given again to ``from_state``, so a changed
condition applies to the held events after a restart.

Errors: ``ValueError`` for a malformed pattern, an event without an integer ``ts``, events
fed to a :class:`Matcher` out of event-time order, and a state this version cannot read.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from riverbed.pipelines.operators.json_rows import dumps, json_text, loads

__all__ = [
    "ONCE",
    "Contiguity",
    "Event",
    "EventTimeBuffer",
    "KeyMatcher",
    "Match",
    "Matched",
    "Matcher",
    "OrderedMatcher",
    "Pattern",
    "Quantifier",
    "Released",
    "Step",
    "at_least",
    "between",
    "in_event_time_order",
    "stored_events",
    "times",
]

Event = dict[str, Any]
Match = dict[str, list[Event]]
"""A completed match: each step's name and its events, in event-time order."""
Condition = Callable[[Mapping[str, Any]], bool]

STATE_VERSION = 1
ORDERED_STATE_VERSION = 3
"""The version of :class:`OrderedMatcher`'s state with its events as objects (versions 1 and
2, without early matches, are still read)."""
ROWS_STATE_VERSION = 4
"""The version of :class:`OrderedMatcher`'s state with its events as rows of its
``held_fields`` (written when they are given)."""
WITHOUT_EARLY_VERSION = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class Quantifier:
    """How many consecutive events of the match a step takes: ``min_count`` to
    ``max_count`` (``None``: no limit)."""

    min_count: int
    max_count: int | None

    def __post_init__(self) -> None:
        if self.min_count < 1 or (self.max_count is not None and self.max_count < self.min_count):
            raise ValueError(f"a step takes from {self.min_count} to {self.max_count} events: "
                             "at least 1, and no more than the maximum")  # fmt: skip


def times(n: int) -> Quantifier:
    """Exactly ``n`` events."""
    return Quantifier(min_count=n, max_count=n)


def at_least(n: int) -> Quantifier:
    """``n`` or more events (greedy)."""
    return Quantifier(min_count=n, max_count=None)


def between(n: int, m: int) -> Quantifier:
    """From ``n`` to ``m`` events (greedy)."""
    return Quantifier(min_count=n, max_count=m)


ONCE = times(1)


class Contiguity(Enum):
    STRICT = "next"
    """No other event of the key between two events of a match."""
    RELAXED = "followed_by"
    """Events between two events of a match are skipped."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    name: str
    condition: Condition
    quantifier: Quantifier = ONCE


@dataclass(frozen=True, slots=True, kw_only=True)
class Pattern:
    steps: tuple[Step, ...]
    contiguity: Contiguity
    within_ms: int
    shape: _Shape = field(init=False, repr=False, compare=False)
    """What a :class:`Matcher` derives from the pattern, made once: a matcher is made for
    every key a micro-batch touches."""

    def __post_init__(self) -> None:
        names = [step.name for step in self.steps]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"a pattern needs one or more steps with distinct names: {names}")
        last = self.steps[-1].quantifier
        if last.max_count != last.min_count:
            raise ValueError(f"the last step ({names[-1]!r}) must take a fixed number of events: "
                             "a match is emitted by its last event")  # fmt: skip
        if self.within_ms < 0:
            raise ValueError(f"within_ms must not be negative, not {self.within_ms}")
        object.__setattr__(self, "shape", _shape(self))


def _ts(event: Mapping[str, Any]) -> int:
    ts = event.get("ts")
    if not isinstance(ts, int) or isinstance(ts, bool):
        raise ValueError(f"an event needs an integer ts (epoch ms), not {ts!r}: {event!r}")
    return ts


def _encode(value: dict[str, Any]) -> str:
    return dumps({"v": STATE_VERSION, **value})


def _decode(state: str) -> dict[str, Any]:
    value = loads(state)
    if not isinstance(value, dict) or value.get("v") != STATE_VERSION:
        raise ValueError(f"not a version {STATE_VERSION} CEP state: {state[:100]!r}")
    return value


_State = tuple[int, int]
"""A partial match while the matcher searches: (step, events in it), the count capped at the
step's maximum, or at its minimum when unbounded (beyond it, more make no difference)."""


_Move = tuple[_State, int]
"""The state after an event, and the step the event joins."""


@dataclass(frozen=True, slots=True, eq=False)
class _Shape:
    """What a :class:`Matcher` derives from its pattern (:attr:`Pattern.shape`)."""

    steps: tuple[Step, ...]
    names: tuple[str, ...]
    conditions: tuple[Condition, ...]
    least: int
    """The fewest events a match has."""
    dead_end: int
    """Strict, with a last step of one event: the mask of an event that can only be that
    step. It can end a match but never be inside one, so once it has ended none, no later
    strict match can span it (a payment approved after fewer than 3 declines)."""
    strict: bool
    caps: tuple[int, ...]
    """Each step's count in a :data:`_State`: its maximum, or its minimum when unbounded."""
    states: tuple[_State, ...]
    """Every :data:`_State`."""
    moves_by: dict[tuple[_State, int], tuple[_Move, ...]] = field(default_factory=dict)
    """:meth:`moves`, made once per (state, mask)."""

    def moves(self, state: _State, mask: int) -> tuple[_Move, ...]:
        """The states after an event of ``mask`` (the steps whose conditions it meets) and
        the step it joins, preferred first: take it in this step, move on to the next one
        (skipping it, with relaxed contiguity, comes last: :meth:`Matcher._best_match`)."""
        known = self.moves_by.get((state, mask))
        if known is not None:
            return known
        i, k = state
        quantifier = self.steps[i].quantifier
        out: list[_Move] = []
        if mask >> i & 1 and (quantifier.max_count is None or k < quantifier.max_count):
            out.append(((i, min(k + 1, self.caps[i])), i))
        if k >= quantifier.min_count and i < len(self.steps) - 1 and mask >> (i + 1) & 1:
            out.append(((i + 1, 1), i + 1))
        self.moves_by[(state, mask)] = moves = tuple(out)
        return moves


def _shape(pattern: Pattern) -> _Shape:
    last = len(pattern.steps) - 1
    once = pattern.steps[last].quantifier.max_count == 1
    strict = pattern.contiguity is Contiguity.STRICT
    caps = tuple(
        s.quantifier.min_count if s.quantifier.max_count is None else s.quantifier.max_count
        for s in pattern.steps
    )
    return _Shape(
        steps=pattern.steps,
        names=tuple(step.name for step in pattern.steps),
        conditions=tuple(step.condition for step in pattern.steps),
        least=sum(step.quantifier.min_count for step in pattern.steps),
        dead_end=1 << last if once and strict else 0,
        strict=strict,
        caps=caps,
        states=tuple((i, k) for i in range(len(caps)) for k in range(1, caps[i] + 1)),
    )


class Matcher:
    """Matches a pattern in one key's events, fed in event-time order (module docstring).

    State: ``{"v": 1, "frontier_ms": ..., "events": [...]}``, the held events, oldest first,
    and the event time below which no event may be fed any more (the latest event fed, or
    the watermark given to :meth:`expire`).

    Cost: conditions are evaluated once per event fed (and per held event when the state is
    loaded); an event that satisfies the last step's condition takes a search over the held
    events, in time proportional to their number times the steps' counts (the maximum, or
    the minimum when unbounded)."""

    def __init__(self, pattern: Pattern) -> None:
        self.pattern = pattern
        self._shape = pattern.shape
        self._held: list[tuple[Event, int]] = []  # each event and the bit mask of its steps
        self._frontier_ms: int | None = None

    def __len__(self) -> int:
        """The number of events held."""
        return len(self._held)

    def feed(self, events: Iterable[Mapping[str, Any]]) -> list[Match]:
        """The matches that the events complete, at most one per event; the events must come
        in event-time order, none older than the frontier (class docstring)."""
        checked = []
        for event in events:
            _ts(event)  # a ValueError for an event without an integer ts
            checked.append(dict(event))
        return self._feed(checked)

    def _feed(self, events: Sequence[Event], masks: Sequence[int] | None = None) -> list[Match]:
        """:meth:`feed` of events whose ``ts`` has been checked (:class:`OrderedMatcher`'s,
        released by its buffer), taken as they are; ``masks``: their :meth:`_mask`, if
        already known."""
        matches = []
        for event, mask in zip(events, masks or map(self._mask, events), strict=True):
            match = self._feed_one(event, mask)
            if match is not None:
                matches.append(match)
        return matches

    def expire(self, watermark_ms: int) -> None:
        """Drop the held events that can no longer be part of a match, no event older than
        ``watermark_ms`` being fed from now on."""
        if self._frontier_ms is None or watermark_ms > self._frontier_ms:
            self._frontier_ms = watermark_ms
        self._drop_before(watermark_ms - self.pattern.within_ms)

    def next_expiry_ms(self) -> int | None:
        """The watermark from which :meth:`expire` drops an event held now (``None``: none
        held): the time of an event-time timer."""
        return self._held[0][0]["ts"] + self.pattern.within_ms + 1 if self._held else None

    def to_state(self) -> str:
        return _encode(self._dump())

    @classmethod
    def from_state(cls, state: str, *, pattern: Pattern) -> Matcher:
        value = _decode(state)
        return cls._load(value["frontier_ms"], value["events"], pattern)

    def _dump(self) -> dict[str, Any]:
        return {"frontier_ms": self._frontier_ms, "events": [e for e, _ in self._held]}

    def _could_match(self, masks: Sequence[int]) -> bool:
        """Whether feeding events of ``masks`` (:meth:`_mask`) could complete a match: one
        of them must fit the last step, and, with the events held, each step must find its
        minimum count of events that fit it (a necessary condition, much cheaper to check
        than feeding them)."""
        last = len(self.pattern.steps) - 1
        if not any(mask >> last & 1 for mask in masks):
            return False
        every = [*masks, *(mask for _, mask in self._held)]
        return all(
            sum(mask >> i & 1 for mask in every) >= step.quantifier.min_count
            for i, step in enumerate(self.pattern.steps)
        )

    def _copy(self) -> Matcher:
        """A matcher in this one's state, to feed apart (the events are shared: never
        changed)."""
        copy = Matcher(self.pattern)
        copy._frontier_ms, copy._held = self._frontier_ms, list(self._held)
        return copy

    @classmethod
    def _load(cls, frontier_ms: Any, events: list[Event], pattern: Pattern) -> Matcher:
        """The matcher of a state's frontier and events (:meth:`_dump`), whose events it
        takes as they are (they are never changed, here or by the caller)."""
        matcher = cls(pattern)
        matcher._frontier_ms = None if frontier_ms is None else int(frontier_ms)
        matcher._held = [(e, matcher._mask(e)) for e in events]
        return matcher

    def _mask(self, event: Mapping[str, Any]) -> int:
        mask, bit = 0, 1
        for condition in self._shape.conditions:
            if condition(event):
                mask |= bit
            bit <<= 1
        return mask

    def _drop_before(self, ts: int) -> None:
        held = self._held
        if not held or held[0][0]["ts"] >= ts:
            return
        kept = 1
        while kept < len(held) and held[kept][0]["ts"] < ts:
            kept += 1
        del held[:kept]

    def _feed_one(self, event: Event, mask: int) -> Match | None:
        ts = event["ts"]
        if self._frontier_ms is not None and ts < self._frontier_ms:
            raise ValueError(f"events must be fed in event-time order: ts {ts} after "
                             f"{self._frontier_ms}")  # fmt: skip
        self._frontier_ms = ts
        self._drop_before(ts - self.pattern.within_ms)
        if not mask:
            if self._shape.strict:
                self._held.clear()  # no strict match spans this event
            return None
        self._held.append((event, mask))
        if not mask >> (len(self.pattern.steps) - 1) & 1:
            return None
        match = self._best_match()
        if match is not None or mask == self._shape.dead_end:
            self._held.clear()  # skip past the last event; or no match can span it
        return match

    def _best_match(self) -> Match | None:
        """The match ending with the last held event that the module docstring prefers.

        Backwards over the held events, ``can_end[j]`` is the set of states from which the
        events ``j..n-1`` can complete a match ending with event ``n - 1``; then the earliest
        start whose state can end, and forwards the first move, in order of preference,
        that still can: one pass each way, instead of trying every start and every path."""
        shape, held = self._shape, self._held
        n = len(held)
        if n < shape.least:
            return None
        masks = [mask for _, mask in held]
        relaxed = not shape.strict
        last = len(shape.steps) - 1
        can_end: list[set[_State]] = [set() for _ in range(n)] + [{(last, shape.caps[last])}]
        for j in range(n - 1, 0, -1):
            after, mask = can_end[j + 1], masks[j]
            skip = relaxed and j < n - 1  # the last event ends the match: not skipped
            can_end[j] = {
                state
                for state in shape.states
                if (skip and state in after) or any(t in after for t, _ in shape.moves(state, mask))
            }
        start = next((s for s in range(n) if masks[s] & 1 and (0, 1) in can_end[s + 1]), None)
        if start is None:
            return None
        match: Match = {step.name: [] for step in shape.steps}
        match[shape.steps[0].name].append(held[start][0])
        state: _State = (0, 1)
        for j in range(start + 1, n):
            options: tuple[tuple[_State, int | None], ...] = shape.moves(state, masks[j])
            if relaxed and j < n - 1:
                options += ((state, None),)
            state, joined = next((t, i) for t, i in options if t in can_end[j + 1])
            if joined is not None:
                match[shape.steps[joined].name].append(held[j][0])
        return match


@dataclass(frozen=True, slots=True, kw_only=True)
class Released:
    events: list[Event]
    """The events the watermark has passed, in event-time order."""
    late: list[Event]
    """The events that arrived below the watermark, in arrival order."""


class EventTimeBuffer:
    """Holds one key's events until the watermark passes them (module docstring).

    State: ``{"v": 1, "watermark_ms": ..., "events": [...]}``, the events held, in
    event-time order, and the highest watermark seen.

    ``held_fields``: the fields of an event that are held (a missing one as null), when the
    pattern and its caller read only some (``None``: all of them). The state is read and
    written whole every micro-batch that touches the key, so what is not needed costs. A
    late event is returned whole."""

    def __init__(self, *, tiebreak_field: str, held_fields: Sequence[str] | None = None) -> None:
        if held_fields is not None and (
            "ts" not in held_fields or tiebreak_field not in held_fields
        ):
            raise ValueError(f"held_fields must include ts and {tiebreak_field!r}: "
                             f"{list(held_fields)}")  # fmt: skip
        self.tiebreak_field = tiebreak_field
        self.held_fields = held_fields
        self.watermark_ms: int | None = None
        self._held: list[Event] = []

    def __len__(self) -> int:
        return len(self._held)

    def order(self, event: Mapping[str, Any]) -> tuple[int, Any]:
        """The sort key of the event-time order, ties aside (:meth:`_insert`), of an event
        whose ``ts`` has been checked."""
        return event["ts"], event[self.tiebreak_field]

    def _insert(self, event: Event) -> None:
        """Put ``event`` in its place in the held events: by :meth:`order`, then, among
        events equal in it, by JSON text, after any identical event. The text is made only
        for a tie: making it for every comparison was most of the buffer's cost. Events
        mostly come in order, so the last held one is compared first."""
        key = self.order(event)
        if not self._held or self.order(self._held[-1]) < key:
            self._held.append(event)
            return
        low = bisect.bisect_left(self._held, key, key=self.order)
        high = bisect.bisect_right(self._held, key, lo=low, key=self.order)
        if low < high:
            texts = [json_text(e) for e in self._held[low:high]]
            low += bisect.bisect_right(texts, json_text(event))
        self._held.insert(low, event)

    def advance(self, events: Iterable[Mapping[str, Any]], *, watermark_ms: int) -> Released:
        """Add ``events``, arrived while the watermark is ``watermark_ms`` (a lower one than
        before is ignored), and release those it has passed."""
        if self.watermark_ms is None or watermark_ms > self.watermark_ms:
            self.watermark_ms = watermark_ms
        late = []
        fields = self.held_fields
        for event in events:
            if _ts(event) < self.watermark_ms:
                late.append(dict(event))
            elif fields is None:
                self._insert(dict(event))
            else:
                self._insert({name: event.get(name) for name in fields})
        held, passed = self._held, 0
        while passed < len(held) and held[passed]["ts"] < self.watermark_ms:
            passed += 1
        if not passed:
            return Released(events=[], late=late)
        released, self._held = held[:passed], held[passed:]
        return Released(events=released, late=late)

    def next_release_ms(self) -> int | None:
        """The watermark from which :meth:`advance` releases an event held now (``None``:
        none held): the time of an event-time timer."""
        return self._held[0]["ts"] + 1 if self._held else None

    def to_state(self) -> str:
        return _encode(self._dump())

    @classmethod
    def from_state(
        cls, state: str, *, tiebreak_field: str, held_fields: Sequence[str] | None = None
    ) -> EventTimeBuffer:
        value = _decode(state)
        return cls._load(value["watermark_ms"], value["events"], tiebreak_field, held_fields)

    def _dump(self) -> dict[str, Any]:
        return {"watermark_ms": self.watermark_ms, "events": self._held}

    @classmethod
    def _load(
        cls,
        watermark_ms: Any,
        events: list[Event],
        tiebreak_field: str,
        held_fields: Sequence[str] | None,
    ) -> EventTimeBuffer:
        """The buffer of a state's watermark and events (:meth:`_dump`), whose events it
        takes as they are (they are never changed, here or by the caller)."""
        buffer = cls(tiebreak_field=tiebreak_field, held_fields=held_fields)
        buffer.watermark_ms = None if watermark_ms is None else int(watermark_ms)
        buffer._held = list(events)  # stored in order (_dump)
        return buffer


def _difference(ours: Sequence[Match], theirs: Sequence[Match]) -> list[Match]:
    """The matches of ``ours`` not in ``theirs``, each of ``theirs`` taking out one equal
    match (few: a key's early matches)."""
    if not ours or not theirs:
        return list(ours)
    rest, out = list(theirs), []
    for match in ours:
        if match in rest:
            rest.remove(match)
        else:
            out.append(match)
    return out


def _settle(
    early: list[Match], matches: list[Match], released_ms: int, matcher: Matcher
) -> tuple[list[Match], list[Match], list[Match]]:
    """The early matches still to settle, the matches to give and the early ones
    withdrawn, once every event below ``released_ms`` has been released and fed to
    ``matcher``, giving ``matches``: those are what the early matches whose last events
    were released become."""
    last = matcher._shape.names[-1]
    passed = 0
    while passed < len(early) and early[passed][last][-1]["ts"] < released_ms:
        passed += 1
    settled = early[:passed]
    return early[passed:], _difference(matches, settled), _difference(settled, matches)


def stored_events(
    fields: Sequence[str] | None,
) -> tuple[Callable[[Event], Any], Callable[[Any], Event]]:
    """How a state keeps events given the ``fields`` held: (event -> stored, stored ->
    event), a list of the fields in their order, or the event itself (``None``)."""
    if fields is None:
        return (lambda event: event), (lambda stored: stored)
    names, row = tuple(fields), _row_of(fields)

    def to_stored(event: Event) -> Any:
        return list(row(event))  # a tuple: as a list, what a state read back holds

    def to_event(stored: Any) -> Event:
        return dict(zip(names, stored, strict=True))

    return to_stored, to_event


def _row_of(fields: Sequence[str]) -> Callable[[Event], tuple[Any, ...]]:
    """A function giving an event's row of ``fields`` as a tuple."""
    if len(fields) == 1:
        (name,) = fields
        return lambda event: (event[name],)
    return operator.itemgetter(*fields)


@dataclass(frozen=True, slots=True, kw_only=True)
class Matched:
    matches: list[Match]
    """The matches completed, in the event-time order of their last events, but for those
    given early exactly so."""
    late: list[Event]
    """The events that arrived below the watermark (not matched), in arrival order."""
    early: list[Match] = field(default_factory=list)
    """Early matches new or changed since the last call, in event-time order."""
    withdrawn: list[Match] = field(default_factory=list)
    """Matches given early before that no longer stand as they were given (a changed one
    is also in ``early`` or ``matches``)."""


class OrderedMatcher:
    """The whole CEP state of one key: an :class:`EventTimeBuffer` in front of a
    :class:`Matcher`. In a Spark stateful processor, call :meth:`advance` with the key's
    rows and the current watermark for each micro-batch, and with no events when the timer
    at :meth:`next_timer_ms` fires; store :meth:`to_state` after each call.

    State: ``[3, watermark_ms, buffer events, frontier_ms, matcher events, early
    matches]``, the two classes' states in one list, the events held being their
    ``held_fields`` (:class:`EventTimeBuffer`), and the early matches given and not yet
    settled, each as its steps' events. A list, not an object of the two objects (version
    1, ``{"v": 1, "buffer": {...}, "matcher": {...}}``, still read, as is version 2, the
    list without early matches): an operator reads and writes every key's state each
    micro-batch that touches it, and orjson reads a slot of ``fraud_alerts``' states in
    this form in about half the time.

    Given ``held_fields``, the state is of version 4: the same list with each event as a
    row of its held fields, in their order, not an object (``["p1", "declined", 17]`` for
    ``{"payment_id": "p1", "status": "declined", "ts": 17}``): half the bytes, which the
    operator sends to Spark's state store for every key of every slot it rewrites
    (``fraud_alerts``' micro-batches at 2,000 payments/s 14% shorter, BENCHMARKS.md). It is
    read with the same held fields; a state of version 3 with them too."""

    def __init__(
        self, pattern: Pattern, *, tiebreak_field: str, held_fields: Sequence[str] | None = None
    ) -> None:
        self.buffer = EventTimeBuffer(tiebreak_field=tiebreak_field, held_fields=held_fields)
        self.matcher = Matcher(pattern)
        self.early: list[Match] = []
        """The early matches given and not settled, in event-time order of their last
        events, all of which are held in the buffer."""

    def advance(
        self, events: Iterable[Mapping[str, Any]], *, watermark_ms: int, early: bool = False
    ) -> Matched:
        """Add ``events`` that arrived while the watermark is ``watermark_ms``; match those
        the watermark has passed, and expire what can no longer match. With ``early``, when
        events were added to those held, match those too (module docstring, "Early
        matches"); early matches given before are settled either way."""
        before = len(self.buffer)
        released = self.buffer.advance(events, watermark_ms=watermark_ms)
        added = len(self.buffer) + len(released.events) - before
        matches = self.matcher._feed(released.events)
        self.matcher.expire(watermark_ms)
        withdrawn: list[Match] = []
        if self.early:
            matches, withdrawn = self._settle(matches)
        given: list[Match] = []
        if early and added:
            given, changed = self._match_early()
            withdrawn += changed
        return Matched(matches=matches, late=released.late, early=given, withdrawn=withdrawn)

    def _settle(self, matches: list[Match]) -> tuple[list[Match], list[Match]]:
        """:func:`_settle` at the watermark (the buffer has released what is below it)."""
        watermark = self.buffer.watermark_ms
        assert watermark is not None  # set by the buffer's advance
        self.early, matches, withdrawn = _settle(self.early, matches, watermark, self.matcher)
        return matches, withdrawn

    def _match_early(self) -> tuple[list[Match], list[Match]]:
        """The early matches new or changed, and those withdrawn: a copy of the matcher fed
        the held events, which the watermark will release to it in this order (none older
        than its frontier: the buffer holds only events at or above the watermark); none
        when the matcher's events and those held cannot make a match."""
        held = self.buffer._held
        masks = [self.matcher._mask(event) for event in held]
        now: list[Match] = []
        if self.matcher._could_match(masks):
            now = self.matcher._copy()._feed(held, masks)
        before, self.early = self.early, now
        return _difference(now, before), _difference(before, now)

    def next_timer_ms(self) -> int | None:
        """The watermark at which to call :meth:`advance` again even without events (to
        release held events or expire partial matches); ``None``: no timer needed."""
        release, expiry = self.buffer.next_release_ms(), self.matcher.next_expiry_ms()
        if release is None or expiry is None:
            return expiry if release is None else release
        return min(release, expiry)

    def to_obj(self) -> list[Any]:
        """The state as JSON-able data; :meth:`to_state` is its JSON text."""
        buffer, matcher = self.buffer, self.matcher
        steps = matcher._shape.names
        if buffer.held_fields is None:
            return [
                ORDERED_STATE_VERSION,
                buffer.watermark_ms,
                buffer._held,
                matcher._frontier_ms,
                [event for event, _ in matcher._held],
                [[match[name] for name in steps] for match in self.early],
            ]
        row = stored_events(buffer.held_fields)[0]
        return [
            ROWS_STATE_VERSION,
            buffer.watermark_ms,
            [row(event) for event in buffer._held],
            matcher._frontier_ms,
            [row(event) for event, _ in matcher._held],
            [[[row(e) for e in match[name]] for name in steps] for match in self.early],
        ]

    def to_state(self) -> str:
        return dumps(self.to_obj())

    @classmethod
    def from_obj(
        cls,
        value: Any,
        *,
        pattern: Pattern,
        tiebreak_field: str,
        held_fields: Sequence[str] | None = None,
    ) -> OrderedMatcher:
        """The matcher :meth:`to_obj` gave ``value`` of. It holds ``value``'s events as they
        are, without a copy: the caller must not change them (:meth:`to_obj` hands out the
        matcher's own lists too)."""
        early: list[list[list[Event]]] = []
        if (
            isinstance(value, list)
            and len(value) == 6
            and value[0] == ROWS_STATE_VERSION
            and held_fields is not None
        ):
            event = stored_events(held_fields)[1]
            _, watermark_ms, buffered, frontier_ms, matching, rows = value
            buffered = [event(row) for row in buffered]
            matching = [event(row) for row in matching]
            early = [[[event(row) for row in step] for step in match] for match in rows]
        elif isinstance(value, list) and len(value) == 6 and value[0] == ORDERED_STATE_VERSION:
            _, watermark_ms, buffered, frontier_ms, matching, early = value
        elif isinstance(value, list) and len(value) == 5 and value[0] == WITHOUT_EARLY_VERSION:
            _, watermark_ms, buffered, frontier_ms, matching = value
        elif isinstance(value, dict) and value.get("v") == STATE_VERSION:
            buffer, matcher = value["buffer"], value["matcher"]
            watermark_ms, buffered = buffer["watermark_ms"], buffer["events"]
            frontier_ms, matching = matcher["frontier_ms"], matcher["events"]
        else:
            raise ValueError(f"not a CEP state of version {ROWS_STATE_VERSION} (with "
                             f"held_fields), {ORDERED_STATE_VERSION}, "
                             f"{WITHOUT_EARLY_VERSION} or {STATE_VERSION}: "
                             f"{str(value)[:100]!r}")  # fmt: skip
        ordered = cls.__new__(cls)
        ordered.buffer = EventTimeBuffer._load(watermark_ms, buffered, tiebreak_field, held_fields)
        ordered.matcher = Matcher._load(frontier_ms, matching, pattern)
        ordered.early = [dict(zip(pattern.shape.names, match, strict=True)) for match in early]
        return ordered

    @classmethod
    def from_state(
        cls,
        state: str,
        *,
        pattern: Pattern,
        tiebreak_field: str,
        held_fields: Sequence[str] | None = None,
    ) -> OrderedMatcher:
        return cls.from_obj(
            loads(state),
            pattern=pattern,
            tiebreak_field=tiebreak_field,
            held_fields=held_fields,
        )


KEY_STATE_VERSION = 5
"""The version of :class:`KeyMatcher`'s state."""
SAME_EVENTS = 0
"""In :class:`KeyMatcher`'s state, the spec's events when they are the matcher's (every
event read has been released to it): kept once."""


class KeyMatcher:
    """The CEP state of one key whose held events are kept by the caller, not in it: an
    operator that keeps a log of every key's held events (a bucket's, by span of event
    time) feeds the key's events to it as the watermark releases them, so that a key's
    state need not be rewritten with all its held events whenever it changes.

    It is :class:`OrderedMatcher` without the buffer: the :class:`Matcher` fed the released
    events, the early matches given and not settled, and (when matching early, ``spec``)
    a second :class:`Matcher` fed every event released or held, in event-time order, so
    that events that arrive after every held one (the usual case) are matched early by
    feeding it alone (:meth:`append`), without the held events. An event that arrives
    before one held needs them all (:meth:`rebuild`).

    The caller releases events up to a *release point* (every event with ``ts`` below it,
    a point at or below the watermark), and gives :meth:`release` the key's released events
    in event-time order; a key with an empty state (:meth:`is_empty`) behaves as a new
    one, so its state can be dropped even while the log holds events of it.

    State: ``[5, frontier_ms, matcher events, early matches, spec frontier_ms, spec
    events]`` (the spec's two null when not matching early; its events
    :data:`SAME_EVENTS` when they are the matcher's), the events as rows of
    ``held_fields`` when given (as :class:`OrderedMatcher`'s version 4), else objects."""

    def __init__(
        self, pattern: Pattern, *, early: bool, held_fields: Sequence[str] | None = None
    ) -> None:
        self.matcher = Matcher(pattern)
        self.spec = Matcher(pattern) if early else None
        self.early: list[Match] = []
        self.held_fields = None if held_fields is None else tuple(held_fields)

    def is_empty(self) -> bool:
        """Whether a new key's matcher would do the same from now on: nothing held in either
        matcher, no early match to settle (a key whose spec holds nothing ends each of its
        held events' matchings with nothing held either, and without a match, else it would
        be an early one)."""
        return not self.matcher._held and not self.early and not (self.spec and self.spec._held)

    def release(self, events: Sequence[Event], release_ms: int) -> Matched:
        """Feed the events released (every event of the key with ``ts`` below
        ``release_ms`` not released before, in event-time order); expire what can no longer
        match; settle the early matches whose last events were released."""
        matches = self.matcher._feed(events)
        self.expire(release_ms)
        withdrawn: list[Match] = []
        if self.early:
            self.early, matches, withdrawn = _settle(self.early, matches, release_ms, self.matcher)
        return Matched(matches=matches, late=[], withdrawn=withdrawn)

    def expire(self, release_ms: int) -> None:
        """Drop what can no longer be part of a match, no event below ``release_ms`` being
        fed from now on."""
        self.matcher.expire(release_ms)
        if self.spec is not None:
            self.spec.expire(release_ms)

    def append(self, events: Sequence[Event]) -> list[Match]:
        """Events that come after every event held, in event-time order: the early matches
        they complete (none when not matching early)."""
        if self.spec is None:
            return []
        given = self.spec._feed(events)
        self.early += given
        return given

    def rebuild(self, held: Sequence[Event]) -> tuple[list[Match], list[Match]]:
        """Every event held, new ones included, in event-time order (an event arrived
        before one held): the early matches new or changed, and those withdrawn."""
        if self.spec is None:
            return [], []
        self.spec = self.matcher._copy()
        now = self.spec._feed(held)
        before, self.early = self.early, now
        return _difference(now, before), _difference(before, now)

    def next_expiry_ms(self) -> int | None:
        """The release point from which :meth:`expire` drops an event held now (``None``:
        none held): the time of an event-time timer."""
        times = [m.next_expiry_ms() for m in (self.matcher, self.spec) if m is not None]
        due = [t for t in times if t is not None]
        return min(due) if due else None

    def to_obj(self) -> list[Any]:
        names, spec = self.matcher._shape.names, self.spec
        stored = stored_events(self.held_fields)[0]

        def events(matcher: Matcher) -> list[Any]:
            return [stored(event) for event, _ in matcher._held]

        held = events(self.matcher)
        spec_held: list[Any] | int | None = None
        if spec is not None:
            pairs = zip(spec._held, self.matcher._held, strict=False)
            same = len(spec._held) == len(self.matcher._held) and all(
                a is b or a == b for (a, _), (b, _) in pairs
            )
            spec_held = SAME_EVENTS if same else events(spec)
        return [
            KEY_STATE_VERSION,
            self.matcher._frontier_ms,
            held,
            [[[stored(e) for e in match[name]] for name in names] for match in self.early],
            None if spec is None else spec._frontier_ms,
            spec_held,
        ]

    @classmethod
    def is_state(cls, value: Any) -> bool:
        """Whether ``value`` is a state of this class (rather than :class:`OrderedMatcher`'s)."""
        return isinstance(value, list) and len(value) == 6 and value[0] == KEY_STATE_VERSION

    @classmethod
    def from_obj(
        cls,
        value: Any,
        *,
        pattern: Pattern,
        early: bool,
        held_fields: Sequence[str] | None = None,
    ) -> KeyMatcher:
        """The matcher :meth:`to_obj` gave ``value`` of (the events taken as they are)."""
        if not cls.is_state(value):
            raise ValueError(f"not a CEP key state of version {KEY_STATE_VERSION}: "
                             f"{str(value)[:100]!r}")  # fmt: skip
        _, frontier, held, matches, spec_frontier, spec_held = value
        event = stored_events(held_fields)[1]
        key = cls.__new__(cls)
        key.held_fields = None if held_fields is None else tuple(held_fields)
        key.matcher = Matcher._load(frontier, [event(e) for e in held], pattern)
        key.spec = None
        if early and spec_held == SAME_EVENTS:
            key.spec = Matcher._load(spec_frontier, [e for e, _ in key.matcher._held], pattern)
        elif early:
            key.spec = Matcher._load(spec_frontier, [event(e) for e in spec_held or []], pattern)
        key.early = [
            {
                name: [event(e) for e in step]
                for name, step in zip(pattern.shape.names, m, strict=True)
            }
            for m in matches
        ]
        return key

    @classmethod
    def of_ordered(cls, ordered: OrderedMatcher, *, early: bool) -> KeyMatcher:
        """The state of ``ordered`` (a key's state written before held events were kept
        apart) but its held events (``ordered.buffer``), which the caller moves to its log."""
        key = cls.__new__(cls)
        fields = ordered.buffer.held_fields
        key.held_fields = None if fields is None else tuple(fields)
        key.matcher, key.early = ordered.matcher, ordered.early
        key.spec = None
        if early:
            key.spec = ordered.matcher._copy()
            key.spec._feed(ordered.buffer._held)
        return key


def in_event_time_order(events: Iterable[Event], *, tiebreak_field: str) -> list[Event]:
    """``events`` (each with a checked ``ts``) in event-time order, as
    :class:`EventTimeBuffer` holds them (ties by JSON text); taken as they are."""
    buffer = EventTimeBuffer(tiebreak_field=tiebreak_field)
    for event in events:
        buffer._insert(event)
    return buffer._held
