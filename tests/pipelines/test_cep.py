"""The CEP pattern matcher of riverbed.pipelines.operators.cep, against brute-force references: the
module docstring's definition tried on every assignment of events to steps, and the
fraud_alerts contract sentence; fraud_alerts' early alerts, in the matcher and through the
operator."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.streaming.tws_tester import TwsTester

from riverbed.pipelines.operators.cep import (
    ONCE,
    Contiguity,
    Event,
    EventTimeBuffer,
    KeyMatcher,
    Match,
    Matcher,
    OrderedMatcher,
    Pattern,
    Quantifier,
    Step,
    at_least,
    between,
    times,
)
from riverbed.pipelines.operators.pattern_matches import EVENT, KEY
from riverbed.pipelines.shop.fraud_alerts import (
    FRAUD,
    HELD_FIELDS,
    TEN_MINUTES_MS,
    alert,
    alerts_processor,
)
from riverbed.testing.references import fraud_alerts

STRICT, RELAXED = Contiguity.STRICT, Contiguity.RELAXED


def of_kinds(kinds: str) -> Callable[[Mapping[str, Any]], bool]:
    """The condition of a step that takes events ``{"kind": k, ...}`` with ``k in kinds``."""
    return lambda event: event["kind"] in kinds


def step(kinds: str, quantifier: Quantifier = ONCE) -> Step:
    """A step named after the kinds it takes."""
    return Step(name=kinds, condition=of_kinds(kinds), quantifier=quantifier)


def pattern(*steps: Step, contiguity: Contiguity = STRICT, within_ms: int = 1000) -> Pattern:
    return Pattern(steps=steps, contiguity=contiguity, within_ms=within_ms)


def stream(text: str, start: int = 0) -> list[Event]:
    """``"a b x a"``: one event per word, one millisecond apart; ``i`` is its position."""
    return [{"kind": k, "ts": start + i, "i": i} for i, k in enumerate(text.split())]


def positions(matches: list[Match]) -> list[dict[str, list[int]]]:
    return [{name: [e["i"] for e in events] for name, events in m.items()} for m in matches]


def run(p: Pattern, text: str) -> list[dict[str, list[int]]]:
    return positions(Matcher(p).feed(stream(text)))


# -- quantifiers, contiguity, within ------------------------------------------------------


def test_once_then_once() -> None:
    assert run(pattern(step("a"), step("b")), "a b a a b") == [
        {"a": [0], "b": [1]},
        {"a": [3], "b": [4]},
    ]


def test_times_in_the_middle_and_at_the_end() -> None:
    p = pattern(step("a", times(2)), step("b", times(2)))
    assert run(p, "a a b b") == [{"a": [0, 1], "b": [2, 3]}]
    assert run(p, "a a a b b") == [{"a": [1, 2], "b": [3, 4]}]
    assert run(p, "a b b") == []
    assert run(pattern(step("a", times(3))), "a a a a a a a") == [
        {"a": [0, 1, 2]},
        {"a": [3, 4, 5]},
    ]


def test_at_least_is_greedy_and_needs_its_minimum() -> None:
    p = pattern(step("a", at_least(3)), step("b"))
    assert run(p, "a a a a a b") == [{"a": [0, 1, 2, 3, 4], "b": [5]}]
    assert run(p, "a a b a a a b") == [{"a": [3, 4, 5], "b": [6]}]


def test_between_takes_at_most_its_maximum() -> None:
    strict = pattern(step("a", between(2, 3)), step("b"))
    assert run(strict, "a a a a a b") == [{"a": [2, 3, 4], "b": [5]}]  # the earliest start
    assert run(strict, "a b") == []
    relaxed = pattern(step("a", between(2, 3)), step("b"), contiguity=RELAXED)
    assert run(relaxed, "a a a a a b") == [{"a": [0, 1, 2], "b": [5]}]  # skips the others


def test_strict_contiguity_is_broken_by_any_other_event() -> None:
    p = pattern(step("a", at_least(2)), step("b"))
    assert run(p, "a a x b") == []
    assert run(p, "a x a a b") == [{"a": [2, 3], "b": [4]}]
    assert run(pattern(step("a"), step("b")), "a c b") == []


def test_relaxed_contiguity_skips_other_events() -> None:
    p = pattern(step("a", at_least(2)), step("b"), contiguity=RELAXED)
    assert run(p, "a x a c b") == [{"a": [0, 2], "b": [4]}]
    assert run(pattern(step("a"), step("b"), step("c"), contiguity=RELAXED), "a b b a c") == [
        {"a": [0], "b": [1], "c": [4]}
    ]


def test_greedy_prefers_the_looping_step_when_an_event_fits_two_steps() -> None:
    p = pattern(step("ab", at_least(1)), step("b"), step("c"))
    assert run(p, "a b b b c") == [{"ab": [0, 1, 2], "b": [3], "c": [4]}]


def test_after_a_match_its_events_and_those_before_are_not_used_again() -> None:
    p = pattern(step("a"), step("b"), contiguity=RELAXED)
    assert run(p, "a a b b") == [{"a": [0], "b": [2]}]
    assert run(p, "a b a b") == [{"a": [0], "b": [1]}, {"a": [2], "b": [3]}]


def test_within_bounds_the_span_of_a_match() -> None:
    p = pattern(step("a"), step("b"), within_ms=10)
    assert positions(
        Matcher(p).feed([{"kind": "a", "ts": 0, "i": 0}, {"kind": "b", "ts": 10, "i": 1}])
    ) == [{"a": [0], "b": [1]}]
    assert Matcher(p).feed([{"kind": "a", "ts": 0}, {"kind": "b", "ts": 11}]) == []


def test_the_oldest_events_of_a_looping_step_drop_out_of_the_front() -> None:
    p = pattern(step("a", at_least(3)), step("b"), within_ms=10)
    events = [{"kind": "a", "ts": t, "i": t} for t in (0, 2, 4, 6, 8)] + [
        {"kind": "b", "ts": 14, "i": 14}
    ]
    assert positions(Matcher(p).feed(events)) == [{"a": [4, 6, 8], "b": [14]}]
    events[-1] = {"kind": "b", "ts": 17, "i": 17}
    assert Matcher(p).feed(events) == []  # only 6 and 8 are within 10 ms


def test_bad_patterns() -> None:
    with pytest.raises(ValueError, match="fixed number"):
        pattern(step("a"), step("b", at_least(1)))
    with pytest.raises(ValueError, match="fixed number"):
        pattern(step("a", between(1, 2)))
    with pytest.raises(ValueError, match="distinct names"):
        pattern(step("a"), step("a"))
    with pytest.raises(ValueError, match="distinct names"):
        pattern()
    with pytest.raises(ValueError, match="negative"):
        pattern(step("a"), within_ms=-1)
    for bad in [(0, 1), (2, 1), (0, None)]:
        with pytest.raises(ValueError, match="at least 1"):
            Quantifier(min_count=bad[0], max_count=bad[1])


def test_events_out_of_order_or_without_a_time_are_refused() -> None:
    matcher = Matcher(pattern(step("a"), step("b")))
    matcher.feed([{"kind": "a", "ts": 5}])
    with pytest.raises(ValueError, match="event-time order"):
        matcher.feed([{"kind": "b", "ts": 4}])
    matcher.expire(20)
    with pytest.raises(ValueError, match="event-time order"):
        matcher.feed([{"kind": "b", "ts": 19}])
    for ts in [None, "5", 5.0, True]:
        with pytest.raises(ValueError, match="integer ts"):
            matcher.feed([{"kind": "b", "ts": ts}])


# -- expiry and state ---------------------------------------------------------------------


def test_expire_drops_what_can_no_longer_match_and_says_when_next() -> None:
    matcher = Matcher(pattern(step("a", at_least(2)), step("b"), within_ms=10))
    assert matcher.next_expiry_ms() is None
    matcher.feed([{"kind": "a", "ts": 0}, {"kind": "a", "ts": 5}])
    assert (len(matcher), matcher.next_expiry_ms()) == (2, 11)
    matcher.expire(10)  # an event at 10 can still match the one at 0
    assert len(matcher) == 2
    matcher.expire(11)
    assert (len(matcher), matcher.next_expiry_ms()) == (1, 16)
    matcher.expire(16)
    assert (len(matcher), matcher.next_expiry_ms()) == (0, None)


def test_strict_state_is_cleared_by_an_event_no_step_wants() -> None:
    matcher = Matcher(pattern(step("a", at_least(2)), step("b")))
    matcher.feed(stream("a a a"))
    assert len(matcher) == 3
    matcher.feed(stream("x", start=3))
    assert len(matcher) == 0


def test_strict_state_is_cleared_by_an_event_that_only_a_last_single_step_wants() -> None:
    """It ended no match, and it can be in none but as the last event: nothing before it is
    held any more (a payment approved after two declines)."""
    strict = Matcher(pattern(step("a", at_least(2)), step("b")))
    assert strict.feed(stream("a b")) == []
    assert len(strict) == 0
    assert positions(strict.feed(stream("a a b", start=2))) == [{"a": [0, 1], "b": [2]}]
    relaxed = Matcher(pattern(step("a", at_least(2)), step("b"), contiguity=RELAXED))
    relaxed.feed(stream("a b"))
    assert len(relaxed) == 2  # a later "a b" can still use the first "a"
    twice = Matcher(pattern(step("a"), step("b", times(2))))
    twice.feed(stream("b"))
    assert len(twice) == 1  # could be the first "b" of a match


def test_the_state_is_json_and_a_foreign_one_is_refused() -> None:
    p = pattern(step("a", at_least(2)), step("b"))
    matcher = Matcher(p)
    matcher.feed(stream("a a"))
    state = matcher.to_state()
    assert json.loads(state) == {
        "v": 1,
        "frontier_ms": 1,
        "events": [{"kind": "a", "ts": 0, "i": 0}, {"kind": "a", "ts": 1, "i": 1}],
    }
    again = Matcher.from_state(state, pattern=p)
    assert again.to_state() == state
    assert positions(again.feed([{"kind": "b", "ts": 2, "i": 2}])) == [{"a": [0, 1], "b": [2]}]
    for bad in ['{"v": 2, "frontier_ms": null, "events": []}', "[]"]:
        with pytest.raises(ValueError, match="version 1"):
            Matcher.from_state(bad, pattern=p)


# -- the event-time buffer ----------------------------------------------------------------


def test_the_buffer_releases_in_event_time_order_once_the_watermark_passed() -> None:
    buffer = EventTimeBuffer(tiebreak_field="id")
    c, b, a = ({"amount": n, "id": i, "ts": 10} for n, i in enumerate("cba"))  # JSON order c b a
    first = buffer.advance([c, b, {"id": "a", "ts": 20}, {"id": "z", "ts": 5}], watermark_ms=0)
    assert (first.events, first.late, buffer.next_release_ms()) == ([], [], 6)
    second = buffer.advance([{"id": "y", "ts": 3}, a], watermark_ms=10)
    assert [e["id"] for e in second.events] == ["z"]  # the events at 10 wait: ts < watermark
    assert second.late == [{"id": "y", "ts": 3}]
    assert buffer.next_release_ms() == 11
    assert buffer.advance([], watermark_ms=11).events == [a, b, c]
    assert buffer.advance([{"id": "x", "ts": 10}], watermark_ms=4).late == [{"id": "x", "ts": 10}]
    assert buffer.watermark_ms == 11  # a lower watermark is ignored
    again = EventTimeBuffer.from_state(buffer.to_state(), tiebreak_field="id")
    assert (again.to_state(), len(again)) == (buffer.to_state(), 1)


def test_events_equal_in_time_and_tiebreak_are_ordered_by_their_content() -> None:
    events = [{"id": "p", "ts": 1, "status": s} for s in ("declined", "approved")]
    for arrival in (events, events[::-1]):
        buffer = EventTimeBuffer(tiebreak_field="id")
        buffer.advance(arrival, watermark_ms=0)
        assert buffer.advance([], watermark_ms=2).events == events[::-1]


def test_the_buffer_holds_only_the_fields_asked_for_and_returns_late_events_whole() -> None:
    buffer = EventTimeBuffer(tiebreak_field="id", held_fields=("id", "ts", "kind"))
    late = {"id": "a", "ts": 1, "kind": "x", "note": "n"}
    out = buffer.advance([late, {"id": "b", "ts": 7, "note": "m"}], watermark_ms=5)
    assert out.late == [late]
    assert json.loads(buffer.to_state())["events"] == [{"id": "b", "ts": 7, "kind": None}]
    again = EventTimeBuffer.from_state(buffer.to_state(), tiebreak_field="id")
    assert again.advance([], watermark_ms=8).events == [{"id": "b", "ts": 7, "kind": None}]
    for without in (("id", "kind"), ("ts", "kind")):
        with pytest.raises(ValueError, match="held_fields must include ts and 'id'"):
            EventTimeBuffer(tiebreak_field="id", held_fields=without)


def test_ordered_matcher_states_of_versions_1_and_2_are_read_and_a_foreign_one_refused() -> None:
    """Checkpoints written before the state was a list hold ``{"v": 1, "buffer": ...,
    "matcher": ...}``: the two parts' states without their own version; those written
    before early matches hold the list of version 2, without them."""
    config: dict[str, Any] = {"pattern": FRAUD, "tiebreak_field": "payment_id"}
    declines = [payment(n, "declined", n) for n in range(3)]
    matcher = OrderedMatcher(FRAUD, tiebreak_field="payment_id")
    matcher.advance([*declines, payment(5, "approved", 5)], watermark_ms=0)
    matcher.advance([], watermark_ms=2)  # the first two declines go on to the matcher
    buffer, matching = (json.loads(part.to_state()) for part in (matcher.buffer, matcher.matcher))
    assert buffer.pop("v") == matching.pop("v") == 1
    assert (buffer["events"], matching["events"]) == (
        [declines[2], payment(5, "approved", 5)],
        declines[:2],
    )
    expected = [3, 2, buffer["events"], 2, matching["events"], []]
    assert json.loads(matcher.to_state()) == expected
    for old in (
        {"v": 1, "buffer": buffer, "matcher": matching},
        [2, 2, buffer["events"], 2, matching["events"]],
    ):
        read = OrderedMatcher.from_obj(old, **config)
        assert read.to_obj() == expected
        found = read.advance([], watermark_ms=6).matches
        assert [alert(m)[1]["declined_count"] for m in found] == [3]
    foreign = [{"v": 2, "buffer": {}, "matcher": {}}, [1, 2, [], 2, []], [2, 2, []]]
    # A state of rows (version 4) needs the held fields to be read.
    for value in [*foreign, [3, 2, [], 2, []], [4, 2, [], 2, [], []], "[]"]:
        with pytest.raises(ValueError, match=r"not a CEP state of version 4 \(with held_fields\), "
                           "3, 2 or 1"):  # fmt: skip
            OrderedMatcher.from_obj(value, **config)


def test_with_held_fields_events_are_kept_as_rows_and_objects_are_still_read() -> None:
    """Given its held fields, the state holds each event as a row of them (version 4),
    about half the bytes of an object; a state of version 3, with objects, is read."""
    fields = ("payment_id", "status", "ts")
    config: dict[str, Any] = {"pattern": FRAUD, "tiebreak_field": "payment_id"}
    declines = [payment(n, "declined", n) for n in range(3)]
    matcher = OrderedMatcher(FRAUD, tiebreak_field="payment_id", held_fields=fields)
    matcher.advance([*declines, payment(5, "approved", 5)], watermark_ms=0, early=True)
    matcher.advance([], watermark_ms=2)  # the first two declines go on to the matcher
    as_rows = [[e[f] for f in fields] for e in [*declines, payment(5, "approved", 5)]]
    state = matcher.to_obj()
    assert state == [4, 2, as_rows[2:], 2, as_rows[:2], [[as_rows[:3], as_rows[3:]]]]
    as_objects = [{f: e[f] for f in fields} for e in [*declines, payment(5, "approved", 5)]]
    version_3 = [3, 2, as_objects[2:], 2, as_objects[:2], [[as_objects[:3], as_objects[3:]]]]
    for value in (state, version_3):
        read = OrderedMatcher.from_state(json.dumps(value), **config, held_fields=fields)
        assert read.to_obj() == state
        assert read.early == matcher.early
        assert read.advance([], watermark_ms=6).matches == []  # settled as given early
    with pytest.raises(ValueError, match="zip"):  # held fields other than those written
        OrderedMatcher.from_obj(state, **config, held_fields=("payment_id", "ts"))


# -- general patterns against the definition ----------------------------------------------

KINDS = ["a", "b", "ab", "bc", "c"]
LOOPING = [ONCE, times(2), at_least(1), at_least(2), between(1, 2), between(2, 3)]


@st.composite
def patterns(draw: st.DrawFn) -> tuple[Pattern, list[str]]:
    """A pattern, and the kinds each of its steps takes."""
    middle = draw(
        st.lists(
            st.tuples(st.sampled_from(KINDS), st.sampled_from(LOOPING)), min_size=0, max_size=2
        )
    )
    last = draw(st.tuples(st.sampled_from(KINDS), st.sampled_from([ONCE, times(2)])))
    steps = [
        Step(name=f"s{i}", condition=of_kinds(ks), quantifier=q)
        for i, (ks, q) in enumerate([*middle, last])
    ]
    pattern = Pattern(
        steps=tuple(steps),
        contiguity=draw(st.sampled_from(Contiguity)),
        within_ms=draw(st.sampled_from([0, 3, 6, 1000, 1000])),
    )
    return pattern, [ks for ks, _ in [*middle, last]]


@st.composite
def streams(draw: st.DrawFn, p: Pattern, step_kinds: list[str]) -> list[Event]:
    """Random events, with runs that fit the pattern's steps planted among them (at most
    12 events: the reference tries every assignment)."""
    kinds: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        kinds += draw(st.lists(st.sampled_from("abcx"), max_size=2))
        for ks, s in zip(step_kinds, p.steps, strict=True):
            count = draw(
                st.integers(max(s.quantifier.min_count - 1, 0), s.quantifier.min_count + 1)
            )
            kinds += draw(st.lists(st.sampled_from(ks), min_size=count, max_size=count))
    gaps = draw(st.lists(st.integers(0, 3), min_size=len(kinds), max_size=len(kinds)))
    return [{"kind": k, "ts": sum(gaps[: i + 1]), "i": i} for i, k in enumerate(kinds[:12])]


def is_match(p: Pattern, events: Sequence[Event], steps: Sequence[int | None]) -> bool:
    """The module docstring's definition of a match: ``steps[i]`` is the step of event ``i``
    (``None``: not in the match)."""
    used = [i for i, s in enumerate(steps) if s is not None]
    order = [s for s in steps if s is not None]
    if not used or order != sorted(order) or sorted(set(order)) != list(range(len(p.steps))):
        return False
    for n, q in enumerate(s.quantifier for s in p.steps):
        count = order.count(n)
        if count < q.min_count or (q.max_count is not None and count > q.max_count):
            return False
    if p.contiguity is STRICT and used != list(range(used[0], used[-1] + 1)):
        return False
    span_ms: int = events[used[-1]]["ts"] - events[used[0]]["ts"]
    return span_ms <= p.within_ms


def assignments(
    options: Sequence[Sequence[int | None]], lowest: int = 0
) -> Iterator[tuple[int | None, ...]]:
    """Every choice of one option per event with the steps in order (a match needs that)."""
    if not options:
        yield ()
        return
    for choice in options[0]:
        if choice is None or choice >= lowest:
            for rest in assignments(options[1:], lowest if choice is None else choice):
                yield (choice, *rest)


def preferred_match(p: Pattern, events: Sequence[Event]) -> Match | None:
    """The match ending with the last event that the module docstring prefers, by trying
    every assignment of events to steps: earliest first event, then, at the first event
    where two differ, in a step rather than skipped, and in the earlier step."""
    last = len(p.steps) - 1
    options = [[None, *(n for n, s in enumerate(p.steps) if s.condition(e))] for e in events]
    options[-1] = [last] if last in options[-1] else []
    skipped = len(p.steps)
    best: tuple[int, tuple[int, ...]] | None = None
    best_steps: tuple[int | None, ...] = ()
    for steps in assignments(options):
        if is_match(p, events, steps):
            first = next(i for i, s in enumerate(steps) if s is not None)
            key = (first, tuple(skipped if s is None else s for s in steps[first:]))
            if best is None or key < best:
                best, best_steps = key, steps
    if best is None:
        return None
    match: Match = {s.name: [] for s in p.steps}
    for event, n in zip(events, best_steps, strict=True):
        if n is not None:
            match[p.steps[n].name].append(event)
    return match


def reference_matches(p: Pattern, events: Sequence[Event]) -> list[Match]:
    matches, restart = [], 0
    for end in range(len(events)):
        since = [e for e in events[restart : end + 1] if e["ts"] >= events[end]["ts"] - p.within_ms]
        match = preferred_match(p, since)
        if match is not None:
            matches.append(match)
            restart = end + 1
    return matches


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_the_matcher_finds_the_defined_matches_with_expiry_and_restarts_anywhere(
    data: st.DataObject,
) -> None:
    p, step_kinds = data.draw(patterns())
    events = data.draw(streams(p, step_kinds))
    matcher, matches = Matcher(p), []
    for i, event in enumerate(events):
        matches += matcher.feed([event])
        upto = events[i + 1]["ts"] if i + 1 < len(events) else event["ts"] + 10
        if data.draw(st.booleans()):
            matcher.expire(data.draw(st.integers(event["ts"], upto)))
        if data.draw(st.booleans()):
            matcher = Matcher.from_state(matcher.to_state(), pattern=p)
        held = json.loads(matcher.to_state())["events"]
        assert all(e["ts"] >= event["ts"] - p.within_ms for e in held)
    assert matches == reference_matches(p, events)


# -- fraud_alerts -------------------------------------------------------------------------


def payment(n: int, status: str, ts: int) -> Event:
    return {
        "payment_id": f"p{n:02d}",
        "card_id": "c1",
        "user_id": "u1",
        "amount_cents": 100,
        "status": status,
        "ts": ts,
    }


def alerts_of(
    batches: Sequence[tuple[Sequence[Event], int]],
    round_trips: Sequence[bool] = (),
    *,
    early: bool = False,
) -> tuple[list[dict[str, Any]], list[Event], OrderedMatcher]:
    """Alerts and late payments for the batches (events, watermark), then the timers until
    none is left; with ``round_trips[i]``, the state is reloaded after batch ``i``. The
    matcher holds the fields the pipeline's does (``HELD_FIELDS``). With ``early``, the
    alerts are what a changelog of the early ones, the withdrawn ones and the settled
    ones ends at, in the order of their approvals."""
    config: dict[str, Any] = {"tiebreak_field": "payment_id", "held_fields": HELD_FIELDS}
    matcher, alerts, late = OrderedMatcher(FRAUD, **config), [], []
    table: dict[str, dict[str, Any]] = {}
    for i, (events, watermark) in enumerate(batches):
        out = matcher.advance(events, watermark_ms=watermark, early=early)
        for match in out.withdrawn:
            del table[alert(match)[0]["payment_id"]]
        for match in (*out.matches, *out.early):
            table[alert(match)[0]["payment_id"]] = alert(match)[1]
        alerts += [alert(m)[1] for m in out.matches]
        late += out.late
        if i < len(round_trips) and round_trips[i]:
            state = matcher.to_state()
            as_obj = json.loads(json.dumps(matcher.to_obj()))
            matcher = OrderedMatcher.from_state(state, pattern=FRAUD, **config)
            assert matcher.to_state() == state
            again = OrderedMatcher.from_obj(as_obj, pattern=FRAUD, **config)
            assert again.to_state() == state
    previous = None
    while (timer := matcher.next_timer_ms()) is not None:
        assert previous is None or timer > previous  # each timer releases or expires events
        out = matcher.advance([], watermark_ms=timer, early=early)
        assert out.early == []  # no event added
        for match in out.withdrawn:
            del table[alert(match)[0]["payment_id"]]
        for match in out.matches:
            table[alert(match)[0]["payment_id"]] = alert(match)[1]
        alerts += [alert(m)[1] for m in out.matches]
        previous = timer
    if early:
        alerts = sorted(table.values(), key=lambda a: (a["approved_ts"], a["payment_id"]))
    return alerts, late, matcher


def test_an_approval_after_three_declines_in_ten_minutes() -> None:
    minute = 60_000
    declines = [payment(n, "declined", t * minute) for n, t in enumerate([0, 1, 5, 6, 7])]
    alerts, _, matcher = alerts_of([([*declines, payment(9, "approved", 14 * minute)], 0)])
    assert alerts == [
        {
            "card_id": "c1",
            "payment_id": "p09",
            "declined_count": 3,
            "first_declined_ts": 5 * minute,
            "approved_ts": 14 * minute,
        }
    ]
    assert len(matcher.buffer) == len(matcher.matcher) == 0
    late_approval = [*declines, payment(9, "approved", 15 * minute + 1)]
    assert alerts_of([(late_approval, 0)])[0] == []


def fraud(payment_id: str, count: int, first_ts: int, approved_ts: int) -> dict[str, Any]:
    return {"card_id": "c1", "payment_id": payment_id, "declined_count": count,
            "first_declined_ts": first_ts, "approved_ts": approved_ts}  # fmt: skip


def test_early_alerts_come_with_their_approval_and_later_payments_correct_them() -> None:
    minute = 60_000
    matcher = OrderedMatcher(FRAUD, tiebreak_field="payment_id", held_fields=HELD_FIELDS)

    def advance(*events: Event, watermark: int = 0) -> tuple[list[Any], list[Any], list[Any]]:
        """The alerts settled, given early and withdrawn by one call."""
        out = matcher.advance(events, watermark_ms=watermark, early=True)
        return (
            [alert(m)[1] for m in out.matches],
            [alert(m)[1] for m in out.early],
            [alert(m)[1]["payment_id"] for m in out.withdrawn],
        )

    declines = [payment(n, "declined", (n + 1) * minute) for n in range(3)]  # 1, 2, 3 minutes
    # Long before the watermark passes them: the alert comes with its approval.
    assert advance(*declines, payment(9, "approved", 5 * minute)) == (
        [], [fraud("p09", 3, minute, 5 * minute)], []
    )  # fmt: skip
    assert advance(payment(8, "approved", 6 * minute)) == ([], [], [])  # no alert, no change
    # Payments in order, one call each, as a stream.
    for n, at in enumerate([7, 8, 9], start=10):
        assert advance(payment(n, "declined", at * minute)) == ([], [], [])
    assert advance(payment(19, "approved", 10 * minute)) == (
        [], [fraud("p19", 3, 7 * minute, 10 * minute)], []
    )  # fmt: skip
    # A decline read later, earlier in event time: the alert counts it.
    assert advance(payment(4, "declined", 0)) == (
        [], [fraud("p09", 4, 0, 5 * minute)], ["p09"]
    )  # fmt: skip
    # An approval read later, between the declines: it is the alert now, with the three
    # declines before it; the one after it is not enough for p09 any more.
    assert advance(payment(5, "approved", 2 * minute + 1)) == (
        [], [fraud("p05", 3, 0, 2 * minute + 1)], ["p09"]
    )  # fmt: skip
    # A payment below the watermark changes nothing: it is late.
    assert advance(payment(6, "approved", 0), watermark=1) == ([], [], [])
    # Once the watermark has passed them, the alerts given early stand: none is given again.
    assert advance(watermark=11 * minute) == ([], [], [])
    assert matcher.early == [] and len(matcher.buffer) == 0


def test_early_alerts_without_events_added_are_not_looked_for() -> None:
    """A call with only late payments, or none, adds nothing to match early."""
    matcher = OrderedMatcher(FRAUD, tiebreak_field="payment_id", held_fields=HELD_FIELDS)
    declines = [payment(n, "declined", 10 + n) for n in range(3)]
    matcher.advance(declines, watermark_ms=0)  # early not asked for
    assert matcher.advance([payment(9, "approved", 5)], watermark_ms=6, early=True).early == []
    out = matcher.advance([payment(8, "approved", 20)], watermark_ms=6, early=True)
    assert [alert(m)[1] for m in out.early] == [fraud("p08", 3, 10, 20)]
    state = matcher.to_obj()
    held = [[e[f] for f in HELD_FIELDS] for e in [*declines, payment(8, "approved", 20)]]
    assert state[5] == [[held[:3], held[3:]]]  # each step's events, as rows
    reloaded = OrderedMatcher.from_state(
        json.dumps(state), pattern=FRAUD, tiebreak_field="payment_id", held_fields=HELD_FIELDS
    )
    assert reloaded.early == matcher.early
    assert reloaded.advance([], watermark_ms=21).matches == []  # settled as given


def test_a_decline_at_the_same_time_counts_if_it_sorts_before_the_approval() -> None:
    base = [payment(1, "declined", 0), payment(2, "declined", 0), payment(8, "approved", 100)]
    assert alerts_of([([*base, payment(7, "declined", 100)], 0)])[0][0]["declined_count"] == 3
    assert alerts_of([([*base, payment(9, "declined", 100)], 0)])[0] == []


def test_declines_before_an_earlier_approval_do_not_count() -> None:
    events = [payment(n, "declined", n) for n in range(3)] + [payment(3, "approved", 3)]
    events += [payment(4, "approved", 4), payment(5, "declined", 5), payment(6, "approved", 6)]
    assert [a["payment_id"] for a in alerts_of([(events, 0)])[0]] == ["p03"]


PAYMENTS = (
    st.sampled_from([10_000, 50_000, 100_000])
    .flatmap(
        lambda step_ms: st.lists(
            st.tuples(
                st.sampled_from(["declined", "declined", "declined", "approved"]),
                st.integers(0, 30).map(lambda k: k * step_ms),  # many ties
                st.sampled_from([0, 0, 0, 1]),  # with 50_000 or 100_000: one past the 10 minutes
            ),
            min_size=4,
            max_size=30,
        )
    )
    .flatmap(
        lambda rows: st.permutations(range(len(rows))).map(
            lambda ids: [payment(n, s, t + d) for n, (s, t, d) in zip(ids, rows, strict=True)]
        )
    )
)


@st.composite
def batches_of(
    draw: st.DrawFn, payments: list[Event], *, on_time: bool
) -> list[tuple[list[Event], int]]:
    """The payments in a random arrival order (or in event-time order) and batches, each
    with a watermark: Spark's (the latest time of earlier batches minus a delay), or,
    ``on_time``, one that leaves no payment late."""
    in_order = sorted(payments, key=lambda p: (p["ts"], p["payment_id"]))
    arrival = draw(st.one_of(st.permutations(payments), st.just(in_order)))
    cuts = sorted(draw(st.lists(st.integers(0, len(arrival)), max_size=6)))
    chunks = [arrival[a:b] for a, b in zip([0, *cuts], [*cuts, len(arrival)], strict=True)]
    delay = draw(st.sampled_from([0, 100_000, TEN_MINUTES_MS, 10**9]))
    batches, seen = [], -(10**9)
    for i, chunk in enumerate(chunks):
        if on_time:
            later = [p["ts"] for c in chunks[i:] for p in c]
            watermark = min(later, default=seen) - draw(st.sampled_from([0, 1, 100_000]))
        else:
            watermark = seen - delay
        batches.append((chunk, watermark))
        seen = max([seen, *(p["ts"] for p in chunk)])
    return batches


@settings(max_examples=300, deadline=None)
@given(payments=PAYMENTS, data=st.data(), early=st.booleans())
def test_fraud_alerts_are_those_of_the_contract_for_the_payments_not_late(
    payments: list[Event], data: st.DataObject, early: bool
) -> None:
    """Early alerts too: what their changelog ends at."""
    batches = data.draw(batches_of(payments, on_time=False))
    alerts, late, matcher = alerts_of(batches, early=early)
    watermark, expected_late = -(10**18), []
    for events, batch_watermark in batches:
        watermark = max(watermark, batch_watermark)
        expected_late += [p for p in events if p["ts"] < watermark]
    assert late == expected_late
    assert alerts == fraud_alerts([p for p in payments if p not in expected_late])
    assert len(matcher.buffer) == len(matcher.matcher) == len(matcher.early) == 0  # nothing left


@settings(max_examples=100, deadline=None)
@given(payments=PAYMENTS, data=st.data())
def test_fraud_alerts_do_not_depend_on_the_arrival_order(
    payments: list[Event], data: st.DataObject
) -> None:
    one = alerts_of(data.draw(batches_of(payments, on_time=True)))
    other = alerts_of(data.draw(batches_of(payments, on_time=True)))
    assert one[1] == other[1] == []
    assert one[0] == other[0] == fraud_alerts(payments)


@settings(max_examples=100, deadline=None)
@given(payments=PAYMENTS, data=st.data(), early=st.booleans())
def test_reloading_the_state_anywhere_changes_nothing(
    payments: list[Event], data: st.DataObject, early: bool
) -> None:
    batches = data.draw(batches_of(payments, on_time=False))
    round_trips = data.draw(st.lists(st.booleans(), min_size=len(batches), max_size=len(batches)))
    reloaded = alerts_of(batches, round_trips, early=early)[:2]
    assert reloaded == alerts_of(batches, early=early)[:2]


# -- fraud_alerts' operator with early alerts, through PySpark's TwsTester ----------------

NEVER_LATE = 2**62  # the tester's own late filter off: the operator decides (with_event_time)


@settings(max_examples=150, deadline=None)
@given(payments=PAYMENTS, data=st.data())
def test_after_every_batch_the_alerts_written_are_those_of_the_payments_read_so_far(
    payments: list[Event], data: st.DataObject
) -> None:
    """fraud_alerts' operator, micro-batch after micro-batch (its watermark's timers, then
    its payments): the last value per key of what it wrote is the contract's alerts over
    the payments read so far that were not late, and no record repeats its key's value
    (a tombstone included: none for a key without a value)."""
    tester = TwsTester(
        alerts_processor(), timeMode="EventTime", eventTimeExtractor=lambda _: NEVER_LATE
    )
    table: dict[str, Any] = {}

    def write(frame: pd.DataFrame | list[Any]) -> None:
        # (TwsTester.setWatermark gives [] rather than a frame when no timer fires)
        rows = [] if len(frame) == 0 else frame.itertuples(index=False, name=None)
        for topic, key, value in rows:
            if topic == "fraud_alerts":
                key = json.loads(key)["payment_id"]  # of card c1
                assert table.get(key) != (None if value is None else json.loads(value))
                table.pop(key) if value is None else table.update({key: json.loads(value)})

    def expected(read: list[Event]) -> dict[str, Any]:
        return {a["payment_id"]: a for a in fraud_alerts(read)}

    read, watermark = [], 0  # Spark's first, and the tester's: it only moves forward
    for events, batch_watermark in data.draw(batches_of(payments, on_time=False)):
        if batch_watermark > watermark:
            watermark = batch_watermark
            write(tester.setWatermark(watermark))
        if events:  # Spark calls the operator for a key with rows only
            rows = {KEY: ["c1"] * len(events), EVENT: [json.dumps(e) for e in events]}
            write(tester.testInPandas(7, pd.DataFrame(rows)))
        read += [p for p in events if p["ts"] >= watermark]
        assert table == expected(read)
    write(tester.setWatermark(NEVER_LATE))
    assert table == expected(read)


def test_a_key_matcher_matches_early_from_its_spec_and_keeps_its_state_as_rows() -> None:
    """:class:`KeyMatcher`: payments after every held one are matched early by the matcher
    fed all of them (its spec); one before a held one needs them all (rebuild); the release
    settles what was given early; the state is rows, read back the same, and a key with
    nothing held and nothing to settle is empty."""
    minute = 60_000
    fields = HELD_FIELDS[1:]  # the operator leaves the key field out
    key = KeyMatcher(FRAUD, early=True, held_fields=fields)
    declines = [payment(n, "declined", (n + 1) * minute) for n in range(3)]
    assert key.append(declines) == [] and not key.is_empty()
    approval = payment(9, "approved", 5 * minute)
    (given,) = key.append([approval])
    assert alert(given)[1] == fraud("p09", 3, minute, 5 * minute)
    state = key.to_obj()
    rows = [[e[f] for f in fields] for e in [*declines, approval]]
    assert state == [5, None, [], [[rows[:3], rows[3:]]], 5 * minute, 0]  # 0: the matcher's
    assert KeyMatcher.is_state(state) and not KeyMatcher.is_state([4, *state[1:]])
    key = KeyMatcher.from_obj(json.loads(json.dumps(state)), pattern=FRAUD, early=True,
                              held_fields=fields)  # fmt: skip
    assert key.to_obj() == state
    # A decline before the held ones: the alert counts it (given again, the old withdrawn);
    # read back, the events are rows without the card.
    earlier = payment(4, "declined", 0)
    now, withdrawn = key.rebuild(
        [{f: e[f] for f in fields} for e in [earlier, *declines, approval]]
    )
    assert [(len(m["declined"]), m["declined"][0]["ts"]) for m in now] == [(4, 0)]
    assert [m["approved"][0]["payment_id"] for m in withdrawn] == ["p09"]
    # Released up to the approval: the matcher finds the same alert, which stands as given.
    released = [{f: e[f] for f in fields} for e in [earlier, *declines, approval]]
    settled = key.release(released, 5 * minute + 1)
    assert settled.matches == [] and settled.withdrawn == [] and key.is_empty()
    # Every payment read released: the spec's events are the matcher's, kept once.
    later = [{f: e[f] for f in fields} for e in (payment(20 + n, "declined", (6 + n) * minute)
                                                  for n in range(2))]  # fmt: skip
    key.append(later)
    key.release(later, 8 * minute)
    state = key.to_obj()
    assert state[2] == [list(e.values()) for e in later]
    assert state[5] == 0
    again = KeyMatcher.from_obj(state, pattern=FRAUD, early=True, held_fields=fields)
    assert again.to_obj() == state and len(again.spec or []) == 2
    with pytest.raises(ValueError, match="not a CEP key state of version 5"):
        KeyMatcher.from_obj([4, *state[1:]], pattern=FRAUD, early=True, held_fields=fields)


def test_a_key_matcher_takes_an_ordered_matchers_state_but_its_held_events() -> None:
    """A key's state written before the operator kept held events apart: the matcher and
    the early matches as they were, the spec fed the held events (the caller moves them)."""
    ordered = OrderedMatcher(FRAUD, tiebreak_field="payment_id", held_fields=HELD_FIELDS)
    declines = [payment(n, "declined", (n + 1) * 60_000) for n in range(3)]
    ordered.advance(declines, watermark_ms=0, early=True)
    ordered.advance([], watermark_ms=2 * 60_000 + 1)  # the first two released
    key = KeyMatcher.of_ordered(ordered, early=True)
    assert len(key.matcher) == 2 and len(key.spec or []) == 3 and key.early == []
    (given,) = key.append([payment(9, "approved", 4 * 60_000)])
    assert alert(given)[1]["declined_count"] == 3
