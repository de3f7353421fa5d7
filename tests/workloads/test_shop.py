"""The shop workload's generators, without I/O: the contract of DESIGN.md and the data's shape."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
from collections import Counter, defaultdict

import pytest

from riverbed.testing.references import approvals
from riverbed.workloads import ConfigError
from riverbed.workloads.oltp import (
    ORDER_STATUSES,
    PRIMARY_KEYS,
    SCHEMAS,
    Operation,
    OpKind,
    operations,
)
from riverbed.workloads.shop import (
    CLICK_WINDOW_MS,
    KEY_FIELDS,
    SESSION_GAP_MS,
    TOPICS,
    VALUE_FIELDS,
    Event,
    ShopConfig,
    events,
    sustainable_rate,
)

# 2000 shoppers sustain 5 events/s (about 300 per event per second): 40,000 events span
# more than two hours of event time, so users come back for a second visit.
CONFIG = ShopConfig(
    seed=11, users=2000, products=60, event_rate=5, late_fraction=0.02, fraud_fraction=0.005
)
COUNT = 40_000


@functools.cache
def stream(config: ShopConfig = CONFIG, count: int = COUNT) -> tuple[Event, ...]:
    return tuple(itertools.islice(events(config), count))


def test_the_same_config_gives_the_same_events_and_another_seed_others() -> None:
    first = stream(CONFIG, 3000)
    assert tuple(itertools.islice(events(CONFIG), 3000)) == first
    other = tuple(itertools.islice(events(dataclasses.replace(CONFIG, seed=12)), 3000))
    assert [e.value for e in other] != [e.value for e in first]


def test_another_start_shifts_the_event_times_and_changes_nothing_else() -> None:
    shifted = itertools.islice(events(dataclasses.replace(CONFIG, start_ms=1_000)), 3000)
    for event, original in zip(shifted, stream(CONFIG, 3000), strict=True):
        assert event.ts - 1_000 == original.ts - CONFIG.start_ms
        assert {**event.value, "ts": 0} == {**original.value, "ts": 0}


def test_every_event_has_exactly_the_fields_of_its_topic() -> None:
    for event in stream():
        assert event.topic in TOPICS
        assert tuple(event.value) == VALUE_FIELDS[event.topic]
        key_field = KEY_FIELDS[event.topic]
        assert event.key == {key_field: event.value[key_field]}
        assert isinstance(event.value["ts"], int)
        assert event.ts >= CONFIG.start_ms
        for name, value in event.value.items():
            expected = int if name in ("ts", "amount_cents") else str
            assert type(value) is expected, (name, value)
        assert json.loads(json.dumps(event.value)) == event.value
    assert Counter(e.topic for e in stream()).keys() == set(TOPICS)
    statuses = {e.value["status"] for e in stream() if e.topic == "payments"}
    assert statuses == {"approved", "declined"}


def test_ids_are_unique() -> None:
    id_fields = {topic: fields[0] for topic, fields in VALUE_FIELDS.items()}
    ids = [e.value[id_fields[e.topic]] for e in stream()]
    assert len(set(ids)) == len(ids)


def test_disorder_is_bounded_except_for_the_stragglers() -> None:
    youngest = -1
    reordered = 0
    for event in stream():
        if event.straggler:
            assert youngest - event.ts >= CONFIG.late_by_ms
        else:
            assert youngest - event.ts <= CONFIG.disorder_ms
            reordered += youngest - event.ts > 1_000
        youngest = max(youngest, event.ts)
    assert reordered > COUNT // 10  # out of order by more than a second: many


def test_the_late_fraction_is_about_as_configured() -> None:
    # Stragglers made in the last 2 x late_by_ms may not have arrived yet: leave them out.
    cut = max(e.ts for e in stream()) - 2 * CONFIG.late_by_ms
    early = [e for e in stream() if e.ts <= cut]
    share = sum(e.straggler for e in early) / len(early)
    assert CONFIG.late_fraction * 0.7 < share < CONFIG.late_fraction * 1.3


def test_without_disorder_and_stragglers_events_arrive_in_event_time_order() -> None:
    config = dataclasses.replace(CONFIG, disorder_ms=0, late_fraction=0)
    times = [e.ts for e in itertools.islice(events(config), 5000)]
    assert times == sorted(times)


def test_event_time_advances_at_the_event_rate() -> None:
    span_s = (max(e.ts for e in stream()) - CONFIG.start_ms) / 1000
    assert COUNT / CONFIG.event_rate * 0.9 < span_s < COUNT / CONFIG.event_rate * 1.1


def test_clicks_follow_a_search_of_the_same_user_within_10_minutes() -> None:
    more = stream(CONFIG, COUNT + 5000)  # a click's search may still be on its way
    searches = {e.value["search_id"]: e for e in more if e.topic == "searches"}
    clicks = [e for e in stream() if e.topic == "clicks"]
    assert len(clicks) > 2000
    for click in clicks:
        search = searches[click.value["search_id"]]
        assert search.value["user_id"] == click.value["user_id"]
        assert 0 <= click.ts - search.ts <= CLICK_WINDOW_MS
    clicked = Counter(click.value["search_id"] for click in clicks)
    searched = [e.value["search_id"] for e in stream() if e.topic == "searches"]
    never = sum(1 for s in searched if s not in clicked) / len(searched)
    assert 0.3 < never < 0.7  # some searches are never clicked
    assert max(clicked.values()) >= 3  # and some more than once


def test_users_browse_in_sessions_separated_by_30_minutes_or_more() -> None:
    shoppers = {u.user_id for u in CONFIG.cast().users[: CONFIG.cast().shoppers]}
    times: dict[str, list[int]] = defaultdict(list)
    for event in stream():
        if event.value["user_id"] in shoppers:
            times[str(event.value["user_id"])].append(event.ts)
    revisits = 0
    for user_times in times.values():
        user_times.sort()
        gaps = [b - a for a, b in itertools.pairwise(user_times)]
        # Within a visit a shopper acts every 15 s or so; visits are 30 minutes apart.
        assert all(gap < 10 * 60_000 or gap >= SESSION_GAP_MS for gap in gaps), gaps
        revisits += any(gap >= SESSION_GAP_MS for gap in gaps)
    assert revisits > 100
    sessions = [len(t) for t in times.values()]
    assert max(sessions) > 20


def test_with_too_few_users_event_time_waits_and_visits_stay_apart() -> None:
    config = dataclasses.replace(CONFIG, users=50, event_rate=20)
    assert sustainable_rate(config) < 1
    stream_ = list(itertools.islice(events(config), 5000))
    span_s = (max(e.ts for e in stream_) - config.start_ms) / 1000
    assert span_s > 5 * 5000 / config.event_rate
    times: dict[str, list[int]] = defaultdict(list)
    for event in stream_:
        if event.topic != "payments":  # fraudsters' card testing is not a visit
            times[str(event.value["user_id"])].append(event.ts)
    for user_times in times.values():
        gaps = [b - a for a, b in itertools.pairwise(sorted(user_times))]
        assert all(gap < 10 * 60_000 or gap >= SESSION_GAP_MS for gap in gaps), gaps


def fraud_alerts(payments: list[Event]) -> tuple[list[int], list[tuple[int, int]]]:
    """DESIGN.md's fraud rule (riverbed.testing.references): the alerts' declined counts, and
    the near misses, (declines within 10 min, declines since the last approval) of each
    approval after a decline that is no alert."""
    alerts: list[int] = []
    misses: list[tuple[int, int]] = []
    for approval in approvals(p.value for p in payments):
        if approval.alert is not None:
            alerts.append(len(approval.recent))
        elif approval.declines:
            misses.append((len(approval.recent), len(approval.declines)))
    return alerts, misses


def test_card_testing_bursts_and_near_misses() -> None:
    payments = [e for e in stream() if e.topic == "payments"]
    alerts, misses = fraud_alerts(payments)
    assert len(alerts) >= 20
    assert set(alerts) >= {3, 4, 5, 6}
    assert (2, 2) in misses  # two declines only
    assert any(recent < 3 <= since for recent, since in misses)  # the first one too early
    cast = CONFIG.cast()
    fraudsters = {u.user_id for u in cast.users[cast.shoppers :]}
    shoppers_cards = {card for u in cast.users[: cast.shoppers] for card in u.cards}
    tested = [p for p in payments if p.value["user_id"] in fraudsters]
    assert tested and all(p.value["card_id"] in shoppers_cards for p in tested)


@pytest.mark.parametrize(
    "setting",
    [
        {"users": 1},
        {"products": 0},
        {"pages": 0},
        {"event_rate": 0},
        {"event_rate": float("nan")},
        {"disorder_ms": -1},
        {"late_fraction": 0.6},
        {"late_by_ms": -1},
        {"fraud_fraction": 1.5},
        {"oltp_rate": -1},
        {"start_ms": -1},
    ],
)
def test_settings_out_of_range_are_refused(setting: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match=next(iter(setting))):
        ShopConfig(**setting)  # type: ignore[arg-type]


# -- the OLTP operations -------------------------------------------------------------------

OLTP = ShopConfig(seed=5, users=300, products=40, oltp_rate=5)
OPS = tuple(itertools.islice(operations(OLTP), 20_000))
TYPES = {"text": str, "bigint": int, "int": int, "timestamptz": int}
TRANSITIONS = {
    ("pending", "paid"),
    ("pending", "cancelled"),
    ("paid", "shipped"),
    ("paid", "cancelled"),
    ("shipped", "delivered"),
}


def test_operations_are_deterministic() -> None:
    assert tuple(itertools.islice(operations(OLTP), 20_000)) == OPS
    other = tuple(itertools.islice(operations(dataclasses.replace(OLTP, seed=6)), 20_000))
    assert other[OLTP.users + OLTP.products :] != OPS[OLTP.users + OLTP.products :]


def test_the_initial_load_is_the_cast_then_changes_follow_in_time() -> None:
    cast = OLTP.cast()
    load = OPS[: OLTP.users + OLTP.products]
    assert all(op.kind is OpKind.INSERT and op.at_ms == OLTP.start_ms for op in load)
    assert [op.values for op in load[: OLTP.users]] == [
        {"user_id": u.user_id, "name": u.name, "email": u.email, "country": u.country,
         "tier": u.tier}
        for u in cast.users
    ]  # fmt: skip
    assert [op.key for op in load[OLTP.users :]] == [p.product_id for p in cast.products]
    times = [op.at_ms for op in OPS[len(load) :]]
    assert times == sorted(times) and times[0] > OLTP.start_ms
    span_s = (times[-1] - OLTP.start_ms) / 1000
    assert len(times) / OLTP.oltp_rate * 0.9 < span_s < len(times) / OLTP.oltp_rate * 1.1


def replay(ops: tuple[Operation, ...]) -> dict[str, dict[str, dict[str, str | int]]]:
    """Apply the operations to dicts, checking each against the schemas and the state."""
    tables: dict[str, dict[str, dict[str, str | int]]] = {t: {} for t in SCHEMAS}
    for op in ops:
        types = {name: TYPES[kind] for name, kind in SCHEMAS[op.table]}
        rows = tables[op.table]
        for name, value in op.values.items():
            assert type(value) is types[name], (op, name)
        if op.kind is OpKind.INSERT:
            assert op.key not in rows and tuple(op.values) == tuple(types), op
            assert op.values[PRIMARY_KEYS[op.table]] == op.key
            if op.table == "orders":
                assert op.values["user_id"] in tables["users"], op
                assert op.values["product_id"] in tables["products"], op
                assert op.values["status"] == "pending" and op.values["created_at"] == op.at_ms
            rows[op.key] = dict(op.values)
        elif op.kind is OpKind.UPDATE:
            assert op.key in rows and op.values, op
            assert PRIMARY_KEYS[op.table] not in op.values
            if "status" in op.values:
                transition = (rows[op.key]["status"], op.values["status"])
                assert transition in TRANSITIONS, op
            rows[op.key].update(op.values)
        else:
            assert op.key in rows and op.values == {}, op
            del rows[op.key]
    return tables


def test_operations_fit_the_schemas_and_the_state_they_change() -> None:
    tables = replay(OPS)
    changes = Counter(
        (op.kind, op.table, tuple(op.values) if op.kind is OpKind.UPDATE else ())
        for op in OPS[OLTP.users + OLTP.products :]
    )
    for table in SCHEMAS:
        assert changes[(OpKind.DELETE, table, ())] > 0, table
    assert changes[(OpKind.INSERT, "users", ())] > 0  # sign-ups
    assert changes[(OpKind.INSERT, "products", ())] > 0
    for columns in [("price_cents",), ("category",), ("status",), ("quantity",), ("tier",),
                    ("country",), ("email",), ("name", "email")]:  # fmt: skip
        assert any(key[2] == columns and n > 0 for key, n in changes.items()), columns
    statuses = Counter(str(row["status"]) for row in tables["orders"].values())
    assert set(statuses) == set(ORDER_STATUSES)
    assert statuses["cancelled"] > 0


def test_without_an_oltp_rate_there_is_only_the_initial_load() -> None:
    config = dataclasses.replace(OLTP, oltp_rate=0)
    assert len(list(operations(config))) == config.users + config.products
