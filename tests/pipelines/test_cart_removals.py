"""cart_removals in a real Spark session against a real broker, checked against the
plain-Python reference on carts generated here (independently of riverbed.eventsourcing and
riverbed.workloads): events in transactions over 3 partitions, out of order within the
watermark delay, with every event type, unreadable records and a tombstone among them, and
an aborted transaction whose removals must never count; very late removals go to
cart_removals_late (each once, with the reason), and a far-future CheckedOut, no removal,
closes every window. The reference's rule itself is checked by hand first."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from riverbed.testing.references import cart_removals
from tests.support.brokers import BrokerProcess, create_topic
from tests.support.events import BASE, MINUTE, disordered
from tests.support.pipelines import PipelineProcess, late_reasons, stop_once_written
from tests.support.topics import changelog, keyed, produce_records
from tests.support.transactions import txn_producer

HOUR = 60 * MINUTE
EVENTS = "shop.carts.events"
PRODUCTS = [f"p{i}" for i in range(6)]
Event = dict[str, Any]


def cart_event(cart_id: str, version: int, kind: str, data: dict[str, Any], ts: int) -> Event:
    """An event as DESIGN.md's ``shop.carts.events`` holds it."""
    return {
        "event_id": f"{cart_id}-{version}",
        "cart_id": cart_id,
        "user_id": f"user-{cart_id}",
        "version": version,
        "type": kind,
        "data": data,
        "command_id": f"cmd-{cart_id}-{version}",
        "ts": ts,
        "schema": 1,
    }


def carts(seed: int, *, count: int, start: int, hours: float, prefix: str) -> list[Event]:
    """Cart histories as the command processor would write them: versions 1, 2, 3 ... of
    adds, removals of a line the cart holds, and for some a checkout (its shipping address
    sealed, or null once the user was forgotten), after which nothing; a second to 20
    minutes apart, so a cart's removals fall in several windows."""
    rng = random.Random(seed)
    events: list[Event] = []
    for c in range(count):
        cart_id, ts = f"{prefix}{c}", start + rng.randrange(int(hours * HOUR))
        lines: set[str] = set()
        for version in range(1, rng.randint(2, 12)):
            roll = rng.random()
            kind, data = "ItemAdded", {"product_id": rng.choice(PRODUCTS), "quantity": 1}
            if lines and roll < 0.1:
                address = rng.choice([None, {"key_id": "k1", "sealed": "AAEC"}])
                kind, data = "CheckedOut", {"shipping_address": address}
            elif lines and roll < 0.5:
                kind, data = "ItemRemoved", {"product_id": rng.choice(sorted(lines))}
                lines.remove(data["product_id"])
            else:
                lines.add(data["product_id"])
            events.append(cart_event(cart_id, version, kind, data, ts))
            if kind == "CheckedOut":
                break
            ts += rng.randrange(1_000, 20 * MINUTE)
    return events


def removed_at(cart_id: str, product: str, *times: int) -> list[Event]:
    """A cart that adds ``product`` and removes it again at each of ``times``."""
    events = []
    for i, ts in enumerate(times):
        added = {"product_id": product, "quantity": 1}
        events.append(cart_event(cart_id, 2 * i + 1, "ItemAdded", added, ts - 1))
        events.append(cart_event(cart_id, 2 * i + 2, "ItemRemoved", {"product_id": product}, ts))
    return events


def records(events: Sequence[Event]) -> list[tuple[bytes, bytes]]:
    return [
        (json.dumps({"cart_id": e["cart_id"]}).encode(), json.dumps(e).encode()) for e in events
    ]


def produce_in_transactions(
    bootstrap: str, events: Sequence[Event], *, transactional_id: str, commit: bool = True
) -> None:
    """As the command processor writes them: in transactions of up to 50 events."""
    producer = txn_producer(bootstrap, transactional_id)
    for first in range(0, len(events), 50):
        producer.begin_transaction()
        for key, value in records(events[first : first + 50]):
            producer.produce(EVENTS, value, key=key)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


def test_the_reference_counts_removals_per_product_and_half_open_hour() -> None:
    events = [
        *removed_at("a", "p1", BASE, BASE + HOUR - 1, BASE + HOUR),
        *removed_at("b", "p2", BASE + 5),
        cart_event("c", 1, "ItemAdded", {"product_id": "p1", "quantity": 2}, BASE + 7),
        cart_event("c", 2, "CheckedOut", {"shipping_address": None}, BASE + 8),
    ]
    window = {"window_start": BASE, "window_end": BASE + HOUR}
    next_window = {"window_start": BASE + HOUR, "window_end": BASE + 2 * HOUR}
    assert sorted(cart_removals(events), key=lambda r: (r["window_start"], r["product_id"])) == [
        {**window, "product_id": "p1", "removals": 2},
        {**window, "product_id": "p2", "removals": 1},
        {**next_window, "product_id": "p1", "removals": 1},
    ]


def test_removals_per_product_and_hour(broker_process: BrokerProcess, tmp_path: Path) -> None:
    bootstrap = broker_process.bootstrap
    create_topic(bootstrap, EVENTS, partitions=3)
    on_time = carts(1, count=160, start=BASE, hours=3, prefix="cart") + removed_at(
        "edge", "p0", BASE + HOUR - 1, BASE + HOUR, BASE + 2 * HOUR - 1
    )
    kinds = {e["type"] for e in on_time}
    assert kinds == {"ItemAdded", "ItemRemoved", "CheckedOut"}
    expected = keyed(cart_removals(on_time), "window_start", "product_id")
    assert (
        len(expected) >= 3 * len(PRODUCTS) and sum(v["removals"] for v in expected.values()) > 150
    )
    arrival = disordered(on_time, seed=2, max_ms=30_000)
    produce_in_transactions(bootstrap, arrival[:500], transactional_id="carts-1")
    # Rolled back: read_committed, none of these may count (nor be late).
    aborted = carts(3, count=20, start=BASE + HOUR, hours=1, prefix="aborted")
    assert any(e["type"] == "ItemRemoved" for e in aborted)
    produce_in_transactions(bootstrap, aborted, transactional_id="carts-2", commit=False)
    produce_in_transactions(bootstrap, arrival[500:], transactional_id="carts-1")
    junk = [
        (b'{"cart_id": "junk"}', None),  # a tombstone
        (b'{"cart_id": "junk"}', b"not json"),
        (b'{"cart_id": "junk"}', b'["ItemRemoved"]'),
        (b'{"cart_id": "junk"}', b"{}"),
        *records([{**cart_event("junk", 1, "ItemRemoved", {}, BASE), "data": None}]),
        *records([{k: v for k, v in e.items() if k != "ts"} for e in removed_at("j2", "p1", BASE)]),
        *records([{**e, "ts": "soon"} for e in removed_at("j3", "p1", BASE)]),
        *records([{**e, "type": "ItemRemovedTwice"} for e in removed_at("j4", "p1", BASE)]),
    ]
    produce_records(bootstrap, EVENTS, junk)

    checkpoint = tmp_path / "checkpoint"
    pipeline = PipelineProcess.start(tmp_path, "cart_removals", bootstrap, checkpoint)
    done = pipeline.wait_caught_up()
    # Very late: removals in the first hour, sent once the watermark is hours past it; the
    # adds before them are late too, but no removal: not in the side output.
    stragglers = [
        e for e in carts(4, count=20, start=BASE, hours=0.5, prefix="late") if e["ts"] < BASE + HOUR
    ]
    late_removals = [e for e in stragglers if e["type"] == "ItemRemoved"]
    assert late_removals
    produce_in_transactions(bootstrap, stragglers, transactional_id="carts-1")
    pipeline.wait_caught_up(done)
    far = cart_event("far", 1, "CheckedOut", {"shipping_address": None}, BASE + 24 * HOUR)
    produce_in_transactions(bootstrap, [far], transactional_id="carts-1")

    results = stop_once_written(
        pipeline, bootstrap, "cart_removals", keys=len(expected), timeout_s=120
    )
    assert changelog(results) == expected
    assert len(results) == len(expected)  # each window once
    for event, reason in late_reasons(bootstrap, "cart_removals_late", late_removals, "event_id"):
        start = event["ts"] - event["ts"] % HOUR
        assert f"window [{start}, {start + HOUR}) was already complete" in reason
