"""fraud_alerts and fraud_alerts_late: the CEP processor's timers and lateness with Spark's
own in-memory tester (TwsTester), then the pipeline in a real Spark session against a real
broker, checked against a plain-Python reference written from the contract sentence:
generated fraud bursts and near misses, produced out of order within the watermark delay,
a kill -9 and restart, very late payments to the side output, and a far-future payment that
releases every payment still held."""

from __future__ import annotations

import gc
import json
import random
import re
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from confluent_kafka import Producer
from pyspark.sql.streaming.tws_tester import TwsTester

from riverbed.pipelines.operators.base import GC_THRESHOLD
from riverbed.pipelines.operators.buckets import LAYOUT, SLOTS
from riverbed.pipelines.operators.pattern_matches import (
    HELD_STATE,
    KEY,
    READ_ONE_BY_ONE,
    SPAN_MS,
    PatternMatches,
    _HeldLog,
)
from riverbed.pipelines.shop.fraud_alerts import HELD_FIELDS, alerts_processor
from riverbed.testing.memory_states import MemoryHandle, OperatorRun
from riverbed.testing.references import fraud_alerts
from riverbed.testing.topic_reader import last_values, repeated_keys
from tests.support.brokers import BrokerProcess
from tests.support.events import BASE, MINUTE, disordered
from tests.support.keyed_states import slot_entries
from tests.support.pipelines import PipelineProcess, late_reasons, stop_once_written
from tests.support.topics import changelog, keyed, produce_events

TEN_MINUTES = 10 * MINUTE
Payment = dict[str, Any]


# -- the generator ------------------------------------------------------------------------

Scenario = Callable[[random.Random], list[tuple[int, str]]]
D, A = "declined", "approved"


def burst(rng: random.Random) -> list[tuple[int, str]]:
    """3 to 6 declines in 9 minutes, then an approval up to a minute later (the first
    declines may fall out of the 10 minutes)."""
    declines = sorted(rng.sample(range(9 * MINUTE), rng.randint(3, 6)))
    return [(t, D) for t in declines] + [(9 * MINUTE + rng.randrange(MINUTE), A)]


def near_miss(rng: random.Random) -> list[tuple[int, str]]:
    """Only 2 declines."""
    return [(0, D), (rng.randrange(1, 3 * MINUTE), D), (3 * MINUTE, A)]


def spread(rng: random.Random) -> list[tuple[int, str]]:
    """3 declines over more than 10 minutes: 2 in the 10 minutes before the approval."""
    return [(0, D), (6 * MINUTE, D), (12 * MINUTE, D), (12 * MINUTE + rng.randrange(MINUTE), A)]


def reset(rng: random.Random) -> list[tuple[int, str]]:
    """4 declines in 5 minutes, but an approval between them."""
    return [(0, D), (MINUTE, D), (2 * MINUTE, A), (3 * MINUTE, D), (4 * MINUTE, D), (5 * MINUTE, A)]


def boundary(rng: random.Random) -> list[tuple[int, str]]:
    """The first decline exactly 10 minutes before the approval (it counts), or 1 ms more
    (it does not)."""
    return [(0, D), (4 * MINUTE, D), (7 * MINUTE, D), (TEN_MINUTES + rng.choice([0, 1]), A)]


def ties(rng: random.Random) -> list[tuple[int, str]]:
    """Declines and the approval at the same ts: the payment ids decide the order."""
    return [(0, D)] + [(MINUTE, rng.choice([D, D, A])) for _ in range(4)] + [(2 * MINUTE, A)]


def noise(rng: random.Random) -> list[tuple[int, str]]:
    """Random payments, some at the same ts."""
    t, out = 0, []
    for _ in range(rng.randint(3, 10)):
        out.append((t, rng.choice([D, D, A])))
        t += rng.choice([0, 1, 20_000, MINUTE, 3 * MINUTE])
    return out


SCENARIOS: list[Scenario] = [burst, burst, near_miss, spread, reset, boundary, ties, noise]


def payments(seed: int, *, cards: int, start: int, minutes: int, prefix: str) -> list[Payment]:
    """Each card's payments: scenarios one after another, 1 to 20 minutes apart. Payment ids
    are unique, their order among equal ts random."""
    rng = random.Random(seed)
    out: list[Payment] = []
    for c in range(cards):
        card, t = f"card{c}", start + rng.randrange(5 * MINUTE)
        while t < start + minutes * MINUTE:
            steps = rng.choice(SCENARIOS)(rng)
            for offset, status in steps:
                out.append(
                    {
                        "payment_id": f"{prefix}{rng.randrange(16**4):04x}-{len(out)}",
                        "card_id": card,
                        "user_id": f"u{c % 7}",
                        "amount_cents": rng.randrange(100, 100_000),
                        "status": status,
                        "ts": t + offset,
                    }
                )
            t += max(offset for offset, _ in steps) + rng.choice([1, 4, 11, 20]) * MINUTE
    return out


def test_generator_covers_the_cases() -> None:
    """The generated payments do contain alerts, near misses and the boundary both ways."""
    generated = payments(7, cards=24, start=BASE, minutes=90, prefix="p")
    alerts = keyed(fraud_alerts(generated), "card_id", "payment_id")
    counts = [a["declined_count"] for a in alerts.values()]
    assert len(alerts) >= 20 and max(counts) >= 4 and min(counts) == 3
    assert any(a["approved_ts"] - a["first_declined_ts"] == TEN_MINUTES for a in alerts.values())
    assert len({p["payment_id"] for p in generated}) == len(generated)
    approvals = sum(p["status"] == A for p in generated)
    assert approvals > 3 * len(alerts)  # most approvals are not alerts


# -- the processor, without Spark ---------------------------------------------------------

NEVER_LATE = 2**62  # the tester's own late filter off: the processor decides (with_event_time)


def rows(*events: Payment) -> pd.DataFrame:
    return pd.DataFrame(
        {KEY: [e["card_id"] for e in events], "event": [json.dumps(e) for e in events]}
    )


def pay(payment_id: str, status: str, ts: int) -> Payment:
    return {
        "payment_id": payment_id,
        "card_id": "c1",
        "user_id": "u1",
        "amount_cents": None,
        "status": status,
        "ts": ts,
    }


def records(frame: pd.DataFrame) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    if frame.empty:
        return []
    return [(t, json.loads(k), json.loads(v)) for t, k, v in frame.itertuples(index=False)]


BUCKET_OF_C1 = 7  # the tester groups by what it is given; Spark would compute the bucket


def held_ranges(tester: TwsTester) -> dict[int, dict[str, list[Any]]]:
    """The bucket's held payments: the first span of a range -> {card: rows}, the index
    left out."""
    peeked = tester.peekMapState(HELD_STATE, BUCKET_OF_C1)
    return {span: json.loads(text) for (span,), (text,) in peeked.items() if span >= 0}


def test_processor_holds_payments_by_span_and_sends_late_payments_aside() -> None:
    tester = TwsTester(
        alerts_processor(), timeMode="EventTime", eventTimeExtractor=lambda _: NEVER_LATE
    )

    def card() -> list[Any] | None:
        """Card c1's [state, listed time], or None when it has no state."""
        return slot_entries(tester.peekMapState("matchers", BUCKET_OF_C1)).get('"c1"')

    def timers() -> set[int]:
        tester.handle.setGroupingKey(BUCKET_OF_C1)
        return set(tester.handle.listTimers())

    def feed(*events: Payment) -> pd.DataFrame:
        return tester.testInPandas(BUCKET_OF_C1, rows(*events))

    def row(p: Payment) -> list[Any]:
        return [p["payment_id"], p["status"], p["ts"]]

    second = SPAN_MS
    # A payment is held in the bucket's range of spans (seconds) that covers its time, as
    # a row without the card; the bucket's timer is at the end of its earliest span. An
    # approval alone can start no match: the card has no state.
    approval = pay("a", A, BASE + 3 * MINUTE)
    assert records(feed(approval)) == []
    assert held_ranges(tester) == {(BASE + 3 * MINUTE) // second: {'"c1"': [row(approval)]}}
    assert card() is None
    assert timers() == {BASE + 3 * MINUTE + second}
    # Out of order: held too, in one range from the first one's span (the approval's range
    # does not cover them), and not released before the watermark passes their spans.
    declines = [pay("d2", D, BASE + MINUTE), pay("d1", D, BASE)]
    assert records(feed(*declines)) == []
    assert held_ranges(tester) == {
        BASE // second: {'"c1"': [row(declines[1]), row(declines[0])]},
        (BASE + 3 * MINUTE) // second: {'"c1"': [row(approval)]},
    }
    assert card() is None  # 2 declines: no match yet
    assert timers() == {BASE + second, BASE + 3 * MINUTE + second}
    # The third decline before the approval: the alert is written at once (early), long
    # before the watermark passes the payments; the card keeps it, to settle it.
    alert = {"card_id": "c1", "payment_id": "a"}
    assert records(feed(pay("d3", D, BASE + 2 * MINUTE))) == [
        (
            "fraud_alerts",
            alert,
            {
                **alert,
                "declined_count": 3,
                "first_declined_ts": BASE,
                "approved_ts": BASE + 3 * MINUTE,
            },
        )
    ]
    state = card()
    assert state is not None and state[1] is None  # no partial match to expire
    assert len(state[0][3]) == 1  # the early alert
    # The watermark at the approval's time: the declines' spans are released, not the
    # approval's (the watermark has not passed the whole of it).
    assert records(tester.setWatermark(BASE + 3 * MINUTE)) == []
    assert list(held_ranges(tester)) == [(BASE + 3 * MINUTE) // second]
    # Once the watermark has passed the approval's span, the alert stands as written: not
    # again, and nothing is left (the timer for the declines' expiry fires for nothing).
    assert records(tester.setWatermark(BASE + 3 * MINUTE + second)) == []
    assert card() is None and held_ranges(tester) == {}
    assert records(tester.setWatermark(BASE + 10 * MINUTE + second)) == []
    assert timers() == set()

    # Declines released into the matcher: listed for each one's expiry, in turn.
    feed(pay("d4", D, BASE + 12 * MINUTE), pay("d5", D, BASE + 13 * MINUTE))
    assert records(tester.setWatermark(BASE + 13 * MINUTE + second)) == []
    assert held_ranges(tester) == {}
    assert (state := card()) is not None and state[1] == BASE + 22 * MINUTE + second
    assert records(tester.setWatermark(BASE + 22 * MINUTE + second)) == []
    assert (state := card()) is not None and state[1] == BASE + 23 * MINUTE + second
    tester.setWatermark(BASE + 30 * MINUTE)
    assert card() is None and timers() == set()

    # Below the watermark: aside, with the reason; never matched.
    late = pay("x", A, BASE + 5 * MINUTE)
    (record,) = records(feed(late))
    topic, key, value = record
    assert (topic, key) == ("fraud_alerts_late", {"payment_id": "x"})
    assert value.pop("reason") == (
        f"too late for event-time order: ts {BASE + 5 * MINUTE} is below the watermark "
        f"{BASE + 30 * MINUTE}, so the events after it may already have been matched without it"
    )
    assert value == late
    assert card() is None and held_ranges(tester) == {} and timers() == set()


@pytest.mark.parametrize("version", [3, 4])
def test_a_card_state_that_holds_its_payments_moves_them_to_the_bucket(version: int) -> None:
    """A card's state written before the bucket held the payments (version 4: rows of the
    held fields without the card; version 3: objects with it) is read: its early alert
    stands as written, its payments move to the bucket's spans when the card is next
    handled, and a payment read later completes an alert with them."""
    tester = TwsTester(
        alerts_processor(), timeMode="EventTime", eventTimeExtractor=lambda _: NEVER_LATE
    )
    sequence = [pay(f"d{i}", D, BASE + i * MINUTE) for i in range(3)] + [
        pay("a", A, BASE + 3 * MINUTE)
    ]
    fields = (
        ("payment_id", "status", "ts")
        if version == 4
        else ("card_id", "payment_id", "status", "ts")
    )
    held = [[p[f] for f in fields] if version == 4 else {f: p[f] for f in fields} for p in sequence]
    old = [version, 0, held, 0, [], [[held[:3], held[3:]]]]  # the watermark 0
    slot = zlib.crc32(b'"c1"') % SLOTS
    entries = {'"c1"': [old, BASE + SPAN_MS], LAYOUT: SLOTS}  # listed at its release
    tester.updateMapState("matchers", BUCKET_OF_C1, {(slot,): (json.dumps(entries),)})
    # More declines and an approval after them, in the same call that moves the payments.
    more = [pay("d9", D, BASE + 4 * MINUTE), pay("e", A, BASE + 5 * MINUTE)]
    assert records(tester.testInPandas(BUCKET_OF_C1, rows(*more))) == []  # 1 decline only
    assert sorted(p for span in held_ranges(tester).values() for p in span['"c1"']) == sorted(
        [p["payment_id"], p["status"], p["ts"]] for p in sequence + more
    )
    state = slot_entries(tester.peekMapState("matchers", BUCKET_OF_C1))['"c1"'][0]
    assert state[0] == 5 and len(state[3]) == 1  # the early alert, to settle
    late_decline = pay("d8", D, BASE + 4 * MINUTE - 1)  # before d9: e has 2 declines now
    assert records(tester.testInPandas(BUCKET_OF_C1, rows(late_decline))) == []
    third = pay("d7", D, BASE + 4 * MINUTE - 2)
    alert = {"card_id": "c1", "payment_id": "e"}
    assert records(tester.testInPandas(BUCKET_OF_C1, rows(third))) == [
        ("fraud_alerts", alert, {**alert, "declined_count": 3,
                                 "first_declined_ts": third["ts"], "approved_ts": more[1]["ts"]})
    ]  # fmt: skip
    assert records(tester.setWatermark(BASE + 6 * MINUTE)) == []  # both stand as written
    assert slot_entries(tester.peekMapState("matchers", BUCKET_OF_C1)) == {}
    assert held_ranges(tester) == {}


def test_a_bucket_holds_payments_in_ranges_of_spans_and_releases_them_by_span() -> None:
    """The log of held payments: a call's payments beyond the ranges make one new range
    per gap, those a range covers go in it; a release takes the whole spans below the
    release point, and keeps a range it passes in part from its earliest payment left."""
    handle = MemoryHandle()
    log = _HeldLog(handle, ts_at=2)

    def add(key: str, *seconds: float) -> None:
        for s in seconds:
            ts = BASE + int(s * 1000)
            log.add(key, ts, [f"p{s}", D, ts])

    def ranges() -> list[list[int]]:
        return [[start - BASE // SPAN_MS, end - BASE // SPAN_MS] for start, end in log.ranges()]

    add("a", 0.5, 3.2)
    add("b", 1.0)
    log.flush(0, after_input=True)
    assert ranges() == [[0, 4]] and handle.timers == {BASE + SPAN_MS}
    add("a", 10, 2.5)  # one in the range, one beyond it
    log.flush(0, after_input=True)
    assert ranges() == [[0, 4], [10, 11]]
    assert handle.maps[HELD_STATE].calls < 12  # an entry a range, not a span
    # Those of the ranges that reach a time (the caller compares the times).
    assert [e[0] for e in log.since("a", BASE + 3000)] == ["p0.5", "p3.2", "p2.5", "p10"]
    assert [e[0] for e in log.since("a", BASE + 5000)] == ["p10"]
    # Released up to 3 s: the first range's spans 0-2; it is kept from 3.2 s on.
    released = log.release(BASE + 3 * SPAN_MS)
    assert {k: sorted(e[0] for e in v) for k, v in released.items()} == {
        "a": ["p0.5", "p2.5"],
        "b": ["p1.0"],
    }
    log.flush(BASE + 3 * SPAN_MS, after_input=False)
    assert ranges() == [[3, 4], [10, 11]] and handle.timers >= {BASE + 4 * SPAN_MS}
    assert [e[0] for e in log.of("a")] == ["p3.2", "p10"] and log.of("b") == []
    log.flush(BASE + 3 * SPAN_MS, after_input=False)
    for s in range(20, 40, 2):  # ranges apart: more than are read one by one
        add("b", s)
        log.flush(BASE + 3 * SPAN_MS, after_input=False)
    assert len(log.ranges()) == 12 > READ_ONE_BY_ONE
    assert [e[0] for e in log.of("b")] == [f"p{s}" for s in range(20, 40, 2)]
    assert [e[0] for e in log.of("a")] == ["p3.2", "p10"]
    assert log.release(BASE + 40 * SPAN_MS).keys() == {"a", "b"}
    log.flush(BASE + 40 * SPAN_MS, after_input=True)
    assert log.ranges() == [] and handle.maps[HELD_STATE].entries == {}
    assert handle.timers == set()


@pytest.mark.parametrize(
    ("early", "held_fields"), [(True, HELD_FIELDS), (False, HELD_FIELDS), (True, None)]
)
def test_processor_over_many_batches_of_disordered_payments_gives_the_reference(
    early: bool, held_fields: tuple[str, ...] | None
) -> None:
    """The processor called as Spark calls it, without Spark (in-memory states), over
    micro-batches of payments out of order within the watermark delay and a few far behind
    it: the last value of each alert is the reference's, none repeats its value, the
    payments below the watermark go aside, and nothing is left once the watermark has
    passed every payment."""

    def processor() -> PatternMatches:  # one per bucket, as each Python worker has its own
        made = alerts_processor()
        made.early, made.held_fields = early, held_fields
        made._held = None if held_fields is None else HELD_FIELDS[1:]
        return made

    generated = payments(11, cards=30, start=BASE, minutes=80, prefix="p")
    rng = random.Random(12)
    arrivals = disordered(generated, seed=13, max_ms=100_000)
    for i in range(10):  # far behind: late once the first half hour has been read
        arrivals.insert(
            len(arrivals) // 2 + i, {**pay(f"late{i}", rng.choice([D, A]), BASE + i * MINUTE)}
        )
    work: list[tuple[int, dict[int, pd.DataFrame]]] = []
    latest, start = None, 0
    while start < len(arrivals):
        size = rng.choice([1, 3, 10, 40, 120])
        batch = arrivals[start : start + size]
        start += size
        watermark = 0 if latest is None else latest - 2 * MINUTE
        by_bucket: dict[int, list[Payment]] = {}
        for p in batch:
            by_bucket.setdefault(zlib.crc32(p["card_id"].encode()) % 3, []).append(p)
            latest = p["ts"] if latest is None else max(latest, p["ts"])
        work.append((watermark, {b: rows(*ps) for b, ps in by_bucket.items()}))
    work.append((BASE + 24 * 60 * MINUTE, {}))  # the watermark past every payment
    run = OperatorRun(processor)
    run(work)

    late = {json.loads(k)["payment_id"] for t, k, _ in run.outputs if t == "fraud_alerts_late"}
    assert {f"late{i}" for i in range(10)} <= late
    records_ = [(k, v) for t, k, v in run.outputs if t == "fraud_alerts"]
    assert repeated_keys(records_) == []
    written = {
        (a["card_id"], a["payment_id"]): a
        for v in last_values(records_).values()
        if v is not None and (a := json.loads(v))
    }
    kept = [p for p in arrivals if p["payment_id"] not in late]
    expected = {(a["card_id"], a["payment_id"]): a for a in fraud_alerts(kept)}
    assert len(expected) >= 20 and written == expected
    if not early:  # each alert once, when the watermark passes it
        assert len(records_) == len(expected)
    for handle in run.handles.values():  # no card's state, no payment held
        assert slot_entries(handle.maps["matchers"].entries) == {}
        assert handle.maps[HELD_STATE].entries == {}


# -- the pipeline -------------------------------------------------------------------------


def test_alerts_late_payments_kill_and_restart(
    broker_process: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = broker_process.bootstrap
    generated = payments(7, cards=24, start=BASE, minutes=90, prefix="p")
    first = [p for p in generated if p["ts"] < BASE + 60 * MINUTE]
    middle = [p for p in generated if BASE + 60 * MINUTE <= p["ts"] < BASE + 75 * MINUTE]
    last = [p for p in generated if p["ts"] >= BASE + 75 * MINUTE]
    # Very late: payments in the first 20 minutes, sent once the first hour was seen.
    rng = random.Random(8)
    stragglers = [
        {
            "payment_id": f"late{i}",
            "card_id": f"card{rng.randrange(24)}",
            "user_id": "u0",
            "amount_cents": 500,
            "status": rng.choice([D, A]),
            "ts": BASE + rng.randrange(20 * MINUTE),
        }
        for i in range(12)
    ]
    checkpoint = tmp_path / "checkpoint"
    # Disorder below the 2-minute watermark delay: nothing of this is late.
    produce_events(
        bootstrap, "payments", disordered(first, seed=1, max_ms=90_000), key_field="card_id"
    )
    # Records that are not payments are left out (and break nothing).
    junk = Producer({"bootstrap.servers": bootstrap})
    valid = {"payment_id": "j", "card_id": "card1", "status": A, "ts": BASE + 30 * MINUTE}
    for value in [
        b"not json",
        b"{}",
        *(json.dumps({k: v for k, v in valid.items() if k != field}).encode() for field in valid),
        json.dumps({**valid, "status": "pending"}).encode(),
    ]:
        junk.produce("payments", value, key=b'{"card_id": "card1"}')
    assert junk.flush(10) == 0
    # So is a payment of another status between an alert's declines and its approval: the
    # alert stands (it neither counts nor breaks the run of declines).
    alert = next(a for a in fraud_alerts(first) if a["approved_ts"] < BASE + 50 * MINUTE)
    pending = {"payment_id": "a-pending", "card_id": alert["card_id"], "user_id": "u0",
               "amount_cents": 100, "status": "pending", "ts": alert["approved_ts"]}  # fmt: skip
    assert pending["payment_id"] < alert["payment_id"]  # before the approval, same ts
    produce_events(bootstrap, "payments", [pending], key_field="card_id")

    pipeline = PipelineProcess.start(tmp_path, "fraud_alerts", bootstrap, checkpoint)
    done = pipeline.wait_caught_up()
    produce_events(bootstrap, "payments", stragglers, key_field="card_id")
    produce_events(
        bootstrap, "payments", disordered(middle, seed=2, max_ms=90_000), key_field="card_id"
    )
    deadline = time.monotonic() + 60
    while not any(b > done and n > 0 for b, n, _ in pipeline.batches()):
        assert time.monotonic() < deadline, pipeline.log()
        time.sleep(0.05)
    pipeline.kill()  # mid-stream: the next batch may be running
    produce_events(
        bootstrap, "payments", disordered(last, seed=3, max_ms=90_000), key_field="card_id"
    )
    pipeline = PipelineProcess.start(tmp_path, "fraud_alerts", bootstrap, checkpoint)
    # After everything else (in the same batch or a later one): it releases every payment.
    far = {**valid, "payment_id": "far", "card_id": "far", "ts": BASE + 24 * 60 * MINUTE}
    produce_events(bootstrap, "payments", [far], key_field="card_id")

    expected = keyed(fraud_alerts([*generated, pending]), "card_id", "payment_id")
    assert alert in expected.values()  # the pending payment changes nothing
    results = stop_once_written(  # the restart included
        pipeline, bootstrap, "fraud_alerts", expected=expected, timeout_s=180
    )
    assert changelog(results) == expected
    # Alerts are written early and corrected by payments read later (out of order), but no
    # record repeats the value its key had: nothing written twice across the kill.
    assert repeated_keys((json.dumps(r.key, sort_keys=True), r.value) for r in results) == []
    for payment, reason in late_reasons(bootstrap, "fraud_alerts_late", stragglers, "payment_id"):
        found = re.fullmatch(
            r"too late for event-time order: ts (\d+) is below the watermark "
            r"(\d+), .*",
            reason,
        )
        assert found is not None, reason
        assert int(found[1]) == payment["ts"] < int(found[2])
        # The watermark of a batch after the first hour was seen, not yet the far payment's.
        assert BASE + 55 * MINUTE < int(found[2]) < BASE + 90 * MINUTE


def test_a_worker_collects_garbage_less_often_once_an_operator_starts() -> None:
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        alerts_processor().init(MemoryHandle())  # type: ignore[arg-type]
        assert gc.get_threshold() == (GC_THRESHOLD, 10, 10)
        gc.set_threshold(GC_THRESHOLD * 2, 5, 5)  # a higher one set by the user is kept
        alerts_processor().init(MemoryHandle())  # type: ignore[arg-type]
        assert gc.get_threshold() == (GC_THRESHOLD * 2, 5, 5)
    finally:
        gc.set_threshold(*before)
