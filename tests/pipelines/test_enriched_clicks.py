"""enriched_clicks: clicks joined with the user's profile as of the click's time.

Unit tests of the as-of join operator (riverbed.pipelines.operators.as_of_join.AsOfJoin) through
PySpark's TwsTester, then the pipeline in a real Spark session against a real broker, fed by
an independent generator of users changes in riverbed's CDC format and of clicks, and
checked against a plain-Python reference written from DESIGN.md's sentence: "each click
with the user's profile as it was at the click's event time (the latest change with
source.ts_ms <= click.ts, a snapshot row counting as valid from the beginning of time; a
deleted or never-seen user gives nulls)", the changes in changelog order (snapshot rows
first, then (commitLsn, lsn)).
"""

from __future__ import annotations

import itertools
import json
import random
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql.streaming.tws_tester import TwsTester

from riverbed.pipelines.operators.as_of_join import (
    CHANGE_KEY,
    CHANGE_VALUE,
    EVENT,
    EVENT_ID,
    EVENT_TS,
    INDEX_ENTRY,
    KEY,
    AsOfJoin,
)
from riverbed.pipelines.operators.buckets import read_slot, slot_text
from riverbed.pipelines.operators.json_rows import read_state
from riverbed.testing.references import enriched_click
from tests.support.brokers import BrokerProcess
from tests.support.events import BASE, MINUTE, disordered
from tests.support.keyed_states import slot_entries
from tests.support.pipelines import PipelineProcess
from tests.support.topics import changelog, produce_events, produce_records, read_json

USERS_TOPIC = "shop.public.users"
PROFILE = ("name", "country", "tier")
HOUR = 60 * MINUTE


# -- riverbed's CDC format, written independently (riverbed/cdc/envelope.py, changes.py) ----


@dataclass
class Users:
    """A fake capture of ``public.users``: snapshot rows (op r, all at the slot's consistent
    point), then transactions in commit order, each delete followed by a tombstone. Under
    REPLICA IDENTITY DEFAULT, ``before`` is null for an update and the key for a delete."""

    lsn: int = 0x16B3748
    tx_id: int = 700
    records: list[tuple[int, bytes, bytes | None]] = field(default_factory=list)
    """(source.ts_ms, key, value) in topic order; tombstones carry their delete's time."""

    def _source(self, ts: int, lsn: int, commit: int, snapshot: str) -> dict[str, Any]:
        return {
            "version": "riverbed", "connector": "postgresql", "name": "shop", "ts_ms": ts,
            "snapshot": snapshot, "db": "shop", "schema": "public", "table": "users",
            "txId": self.tx_id, "lsn": lsn, "commitLsn": commit,
        }  # fmt: skip

    def _add(self, ts: int, user: str, value: dict[str, Any] | None) -> None:
        key = json.dumps({"user_id": user}).encode()
        self.records.append((ts, key, None if value is None else json.dumps(value).encode()))

    def snapshot(self, ts: int, rows: list[dict[str, Any]]) -> None:
        for i, row in enumerate(rows):
            last = "last" if i == len(rows) - 1 else "true"
            source = self._source(ts, self.lsn, self.lsn, last)
            value = {"before": None, "after": row, "source": source, "op": "r", "ts_ms": ts}
            self._add(ts, row["user_id"], value)

    def transaction(
        self, ts: int, changes: list[tuple[str, str, dict[str, Any] | None]], lag_ms: int = 40
    ) -> None:
        """One transaction committed at ``ts``: (op, user_id, after row) each."""
        self.tx_id += 1
        first = self.lsn + 0x100
        commit = first + 0x40 * (len(changes) + 1)
        for i, (op, user, row) in enumerate(changes):
            source = self._source(ts, first + 0x40 * i, commit, "false")
            before = {"user_id": user} if op == "d" else None
            value = {"before": before, "after": row, "source": source, "op": op,
                     "ts_ms": ts + lag_ms}  # fmt: skip
            self._add(ts, user, value)
            if op == "d":
                self._add(ts, user, None)
        self.lsn = commit + 0x100


def versions_of(
    users: list[tuple[int, bytes, bytes | None]], user: str
) -> list[tuple[int | None, dict[str, Any] | None]]:
    """The user's changes in changelog order (snapshot rows first, then (commitLsn, lsn)),
    as riverbed.testing.references.profile_as_of takes them: (source.ts_ms, None for a
    snapshot row; the row after the change, None for a delete)."""
    changes = []
    for _, key, value in users:
        if value is None or json.loads(key)["user_id"] != user:
            continue  # a tombstone: its delete is the change
        envelope = json.loads(value)
        source, snapshot = envelope["source"], envelope["op"] == "r"
        order = (not snapshot, source["commitLsn"], source["lsn"])
        after = envelope["after"] if envelope["op"] != "d" else None
        changes.append((order, None if snapshot else source["ts_ms"], after))
    return [(at_ms, row) for _, at_ms, row in sorted(changes, key=lambda c: c[0])]


def enriched(click: dict[str, Any], users: list[tuple[int, bytes, bytes | None]]) -> Any:
    return enriched_click(click, versions_of(users, click["user_id"]))


# -- the operator, unit-tested with TwsTester --------------------------------------------

RETENTION = 10_000


BUCKET_U1, BUCKET_NONE = 3, 5  # the tester groups by what it is given


def processor() -> AsOfJoin:
    return AsOfJoin(
        id_field="click_id", ts_field="ts", columns=PROFILE, topic="out", late_topic="late",
        retention_ms=RETENTION, prune_resolution_ms=1,
    )  # fmt: skip


def join_tester() -> TwsTester:
    # The pipeline drops the watermarked column, so Spark drops no row: neither does this.
    return TwsTester(processor(), timeMode="EventTime", eventTimeExtractor=lambda row: 1 << 62)


def batch(
    user: str | None, *, clicks: Sequence[tuple[str, int]] = (), users: Users | None = None
) -> pd.DataFrame:
    """The operator's input for one user: clicks and the records of a fake capture."""
    rows = [
        {KEY: user, EVENT_ID: c, EVENT_TS: ts, CHANGE_KEY: None, CHANGE_VALUE: None,
         EVENT: json.dumps({"click_id": c, "user_id": user, "ts": ts})}
        for c, ts in clicks
    ]  # fmt: skip
    for _, key, value in [] if users is None else users.records:
        rows.append(
            {KEY: user, EVENT_ID: None, EVENT_TS: None, EVENT: None,
             CHANGE_KEY: key.decode(), CHANGE_VALUE: None if value is None else value.decode()}
        )  # fmt: skip
    return pd.DataFrame(rows, columns=[KEY, EVENT_ID, EVENT_TS, EVENT, CHANGE_KEY,
                                       CHANGE_VALUE])  # fmt: skip


def kept(t: TwsTester, bucket: int) -> dict[str, tuple[dict[str, Any], int | None]]:
    """The states of a bucket's keys: key -> (state, the time it is listed under)."""
    return {k: (v[0], v[1]) for k, v in slot_entries(t.peekMapState("keys", bucket)).items()}


def out(result: pd.DataFrame) -> list[tuple[str, Any, Any]]:
    """(topic, click id or late change's key, value) of the operator's rows."""
    if result.empty:
        return []
    return [
        (
            topic,
            json.loads(key)["click_id"] if "click_id" in key else json.loads(key),
            json.loads(value),
        )
        for topic, key, value in zip(result["topic"], result["key"], result["value"], strict=True)
    ]


def row(name: str, tier: str, *, user: str = "u1") -> dict[str, Any]:
    return {"user_id": user, "name": name, "email": f"{name}@x", "country": "FR", "tier": tier}


def answers(result: pd.DataFrame) -> dict[str, tuple[Any, ...]]:
    return {c: (v["name"], v["tier"]) for topic, c, v in out(result) if topic == "out"}


def test_clicks_join_the_profile_as_of_their_time_and_late_changes_correct_them() -> None:
    t = join_tester()
    users = Users()
    users.snapshot(1_000, [row("ann", "gold")])
    # A click before the snapshot's read time, one at it, one after: the snapshot row is
    # valid from the beginning of time.
    got = t.testInPandas(
        BUCKET_U1, batch("u1", clicks=[("c0", 999), ("c1", 1_000), ("c2", 1_500)], users=users)
    )
    assert answers(got) == {"c0": ("ann", "gold"), "c1": ("ann", "gold"), "c2": ("ann", "gold")}
    # Late: an update at 1200 corrects c2 only; an update of the email alone corrects none.
    late = Users(lsn=users.lsn)
    late.transaction(1_200, [("u", "u1", row("ann", "silver"))])
    late.transaction(1_300, [("u", "u1", {**row("ann", "silver"), "email": "new@x"})])
    assert answers(t.testInPandas(BUCKET_U1, batch("u1", users=late))) == {"c2": ("ann", "silver")}
    # The same changes again (a replay): nothing. A delete (and its tombstone), a click
    # after it, a re-creation and a click at exactly its time; two updates in one
    # transaction: the later position wins.
    assert out(t.testInPandas(BUCKET_U1, batch("u1", users=late))) == []
    more = Users(lsn=late.lsn)
    more.transaction(2_000, [("d", "u1", None)])
    more.transaction(3_000, [("c", "u1", row("bob", "new")), ("u", "u1", row("bob", "vip"))])
    got = t.testInPandas(BUCKET_U1, batch("u1", clicks=[("c3", 2_500), ("c4", 3_000)], users=more))
    assert answers(got) == {"c3": (None, None), "c4": ("bob", "vip")}
    # A delete committed at 1400, after all that in the log (the committing server's clock
    # stepped back): the latest change from 1400 on, so c2, c3 and c4 lose their profile.
    gone = Users(lsn=more.lsn)
    gone.transaction(1_400, [("d", "u1", None)])
    assert answers(t.testInPandas(BUCKET_U1, batch("u1", users=gone))) == {
        "c2": (None, None),
        "c4": (None, None),
    }  # c3 had none already
    # A click without a user: nulls, nothing kept.
    got = t.testInPandas(BUCKET_NONE, batch(None, clicks=[("c5", 2_000)]))
    assert out(got) == [("out", "c5", {"click_id": "c5", "user_id": None, "ts": 2_000, "name": None,
                                        "country": None, "tier": None})]  # fmt: skip
    assert kept(t, BUCKET_NONE) == {}
    assert list(kept(t, BUCKET_U1)) == ["u1"]


def test_a_click_with_a_nan_is_kept_and_corrected_with_it() -> None:
    """Spark's ``to_json`` writes a NaN field as ``NaN``: the click is kept with it (its
    state is not written with orjson's ``null``) and written again with it when a late
    change corrects it."""
    t = join_tester()
    users = Users()
    users.snapshot(1_000, [row("ann", "gold")])
    clicks = batch("u1", clicks=[("c1", 2_000)], users=users)
    clicks[EVENT] = clicks[EVENT].str.replace('"ts": 2000}', '"ts": 2000, "score": NaN}')
    first = t.testInPandas(BUCKET_U1, clicks)
    assert '"score":NaN' in first["value"][0]
    late = Users(lsn=users.lsn)
    late.transaction(1_500, [("u", "u1", row("ann", "silver"))])
    corrected = t.testInPandas(BUCKET_U1, batch("u1", users=late))
    assert answers(corrected) == {"c1": ("ann", "silver")}
    assert '"score":NaN' in corrected["value"][0]


def logged(t: TwsTester, bucket: int) -> dict[str, list[str]]:
    """The ids of the events a bucket keeps for corrections, by user (every entry of its
    event log), and the log's index left out."""
    found: dict[str, list[str]] = defaultdict(list)
    for (entry,), (text,) in sorted(t.peekMapState("events", bucket).items()):
        if entry != INDEX_ENTRY:
            for user, events in json.loads(text).items():
                found[user] += [event_id for event_id, _, _ in events]
    return dict(found)


def test_retention_forgets_what_the_horizon_passed_and_reports_late_inputs() -> None:
    t = join_tester()
    users = Users()
    users.snapshot(1_000, [row("ann", "gold")])
    users.transaction(5_000, [("u", "u1", row("ann", "silver"))])
    users.transaction(30_000, [("u", "u1", row("ann", "bronze"))])
    t.testInPandas(BUCKET_U1, batch("u1", clicks=[("c1", 6_000), ("c2", 31_000)], users=users))
    assert logged(t, BUCKET_U1) == {"u1": ["c1", "c2"]}
    assert "events" not in kept(t, BUCKET_U1)["u1"][0]  # the user's state: versions only
    # At watermark 16_000 the horizon is 6_000: c1 (at 6_000) is kept for corrections; at
    # 17_002 it is not, though its entry stays until the horizon passes c2 too.
    assert out(t.setWatermark(16_000)) == []
    t.setWatermark(17_002)
    assert logged(t, BUCKET_U1) == {"u1": ["c1", "c2"]}
    state, _ = kept(t, BUCKET_U1)["u1"]
    assert [v[0] for v in state["versions"]] == [5_000, 30_000]
    assert state["history_from"] == 5_000
    # A click older than the horizon: joined with the history kept (exact at 6_500, not
    # at 4_000, which needed the snapshot's version), not kept, and reported.
    got = out(t.testInPandas(BUCKET_U1, batch("u1", clicks=[("old1", 6_500), ("old2", 4_000)])))
    assert [(topic, c) for topic, c, _ in got] == [
        ("out", "old1"),
        ("late", "old1"),
        ("out", "old2"),
        ("late", "old2"),
    ]
    assert got[0][2]["tier"] == "silver" and "may be wrong" not in got[1][2]["reason"]
    assert "ts 6500 is more than 10000 ms behind the watermark 17002" in got[1][2]["reason"]
    assert "the history before 5000 was discarded" in got[3][2]["reason"]
    assert logged(t, BUCKET_U1) == {"u1": ["c1", "c2"]}
    # A change older than the horizon, committed after the one at 30000 (the committing
    # server's clock stepped back): applied, and as the latest change from 5800 on it
    # corrects c2, not c1 (at 6000, below the horizon: forgotten, its answer final);
    # reported.
    late = Users(lsn=users.lsn)
    late.transaction(5_800, [("u", "u1", row("ann", "platinum"))])
    got = out(t.testInPandas(BUCKET_U1, batch("u1", users=late)))
    assert [(topic, c if topic == "out" else None) for topic, c, _ in got] == [
        ("late", None),
        ("out", "c2"),
    ]
    assert got[0][1]["user_id"] == "u1" and got[0][2]["source_ts_ms"] == 5_800
    assert "change at 5800 is more than 10000 ms behind" in got[0][2]["reason"]
    assert got[1][2]["tier"] == "platinum"
    # Once the horizon passes every click and version but the last (in changelog order):
    # the current row only, and an empty log (its timer fired).
    t.setWatermark(30_000 + RETENTION + 2_000)
    state, listed = kept(t, BUCKET_U1)["u1"]
    assert [v[0] for v in state["versions"]] == [5_800]
    assert state["history_from"] == 5_800 and listed is None  # nothing left to prune
    assert t.peekMapState("events", BUCKET_U1) == {}


def test_the_events_of_a_user_never_seen_are_forgotten_by_the_logs_own_timer() -> None:
    """A user without a state (never seen) keeps nothing but its clicks in the log, and no
    key's timer of the bucket would call the operator again: the log's timer forgets them."""
    t = join_tester()
    t.testInPandas(BUCKET_U1, batch("u9", clicks=[("c1", 2_000), ("c2", 2_500)]))
    assert logged(t, BUCKET_U1) == {"u9": ["c1", "c2"]}
    assert kept(t, BUCKET_U1) == {}
    assert out(t.setWatermark(2_500 + RETENTION)) == []
    assert logged(t, BUCKET_U1) == {"u9": ["c1", "c2"]}  # the horizon is not past c2
    t.setWatermark(2_500 + RETENTION + 1)
    assert t.peekMapState("events", BUCKET_U1) == {}


def test_a_state_of_layout_2_moves_its_events_to_the_log() -> None:
    """A checkpoint written before the log kept each user's clicks in the user's state
    (layout 2): they are moved to the log when the user is next read, and corrected as
    before."""
    t = join_tester()
    users = Users()
    users.snapshot(1_000, [row("ann", "gold")])
    t.testInPandas(BUCKET_U1, batch("u1", users=users))
    (slot, (text,)), *_ = (
        item for item in t.peekMapState("keys", BUCKET_U1).items() if "u1" in item[1][0]
    )
    entries, slots = read_slot(text)
    click = {"click_id": "c1", "user_id": "u1", "ts": 2_000}
    written = entries["u1"]
    assert isinstance(written, str)  # not parsed until read
    entry = read_state(written)
    entry[0] |= {"v": 2, "events": {"c1": [2_000, click]}}
    entries["u1"] = entry
    assert slots is not None
    t.updateMapState("keys", BUCKET_U1, {slot: (slot_text(entries, slots),)})
    late = Users(lsn=users.lsn)
    late.transaction(1_500, [("u", "u1", row("ann", "silver"))])
    assert answers(t.testInPandas(BUCKET_U1, batch("u1", users=late))) == {"c1": ("ann", "silver")}
    assert logged(t, BUCKET_U1) == {"u1": ["c1"]}
    state, _ = kept(t, BUCKET_U1)["u1"]
    assert state["v"] == 3 and "events" not in state


# -- the pipeline in Spark ---------------------------------------------------------------


@dataclass
class Shop:
    users: Users
    clicks: list[dict[str, Any]]


def generate(seed: int, minutes: int) -> Shop:
    """Users u0-u11 in a snapshot at BASE, u12-u15 created later, u16-u19 never seen;
    updates (of profile columns, or of the email alone), deletes, re-creations, two changes
    of a user in one transaction, one change committed with a clock 15 s behind the change
    before it; clicks of all of them, some at exactly a change's time, one before the
    snapshot's read time."""
    rng = random.Random(seed)
    users = Users()
    live = {f"u{i}": row(f"n{i}", rng.choice(["free", "gold"]), user=f"u{i}") for i in range(12)}
    users.snapshot(BASE, list(live.values()))
    clicks: list[tuple[str, int]] = [("u0", BASE), ("u1", BASE - 1)]
    t = BASE + 20_000
    scripted = {12: [("d", "u3")], 21: [("c", "u3")], 33: [("u", "u4"), ("u", "u4")]}
    done: set[int] = set()
    skewed = False
    while t < BASE + minutes * MINUTE:
        minute = (t - BASE) // MINUTE
        if minute in scripted and minute not in done:
            picks = scripted[minute]
            done.add(minute)
        else:
            picks = [("?", f"u{rng.randrange(16)}") for _ in range(rng.choice([1, 1, 1, 2, 3]))]
        changes = []
        for op, user in picks:
            if user not in live:
                op = "c"
            elif op == "?":
                op = rng.choice(["u", "u", "u", "u", "d"])
            if op == "d":
                del live[user]
                changes.append(("d", user, None))
                continue
            new = dict(live.get(user) or row(f"n{user}", "free", user=user))
            if op == "u" and rng.random() < 0.25:
                new["email"] = f"{user}.{t}@x"  # no profile column changes
            else:
                new[rng.choice(PROFILE)] = f"{rng.choice(PROFILE)}{rng.randrange(1000)}"
            live[user] = new
            changes.append((op, user, new))
        users.transaction(t, changes)
        for _, user, _ in changes:
            if rng.random() < 0.4:
                clicks.append((user, t))  # at exactly the change's time
        updated = [(user, new) for _, user, new in changes if new is not None]
        if not skewed and t >= BASE + 45 * MINUTE and updated:
            skewed = True  # the next commit's clock is 15 s behind: the changelog decides
            user, new = updated[-1]
            live[user] = {**new, "tier": "skewed"}
            users.transaction(t - 15_000, [("u", user, live[user])])
            clicks += [(user, t - 10_000), (user, t), (user, t + 1_000)]
        t += rng.randrange(20_000, 80_000)
    for _ in range(minutes * 5):
        clicks.append((f"u{rng.randrange(20)}", BASE + rng.randrange(minutes * MINUTE)))
    events = [
        {"click_id": f"cl-{i}", "search_id": f"s-{i // 2}", "user_id": user,
         "product_id": f"p{rng.randrange(50)}", "ts": ts}
        for i, (user, ts) in enumerate(sorted(clicks, key=lambda c: c[1]))
    ]  # fmt: skip
    return Shop(users, events)


def between(shop: Shop, lo: int, hi: int) -> tuple[list[Any], list[dict[str, Any]]]:
    """The CDC records and clicks with a time in [BASE + lo min, BASE + hi min)."""
    start, end = BASE + lo * MINUTE, BASE + hi * MINUTE
    records = [(k, v) for ts, k, v in shop.users.records if start <= ts < end]
    return records, [c for c in shop.clicks if start <= c["ts"] < end]


def phase(
    bootstrap: str, shop: Shop, seed: int, cdc: tuple[int, int], clicks: tuple[int, int]
) -> set[str]:
    """Produce the changes, then the clicks (disorder below 2 minutes); the click ids."""
    records, _ = between(shop, *cdc)
    _, events = between(shop, *clicks)
    produce_records(bootstrap, USERS_TOPIC, records)
    produce_events(bootstrap, "clicks", disordered(events, seed=seed, max_ms=90_000))
    return {e["click_id"] for e in events}


def wait_for(pipeline: PipelineProcess, bootstrap: str, click_ids: set[str]) -> None:
    """Wait until every click in ``click_ids`` is in enriched_clicks (so the batches that
    read them, and the changes produced before them, are committed)."""
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        if pipeline.process.poll() is not None:
            raise AssertionError(f"pipeline exited:\n{pipeline.log()}")
        written = {r.key["click_id"] for r in read_json(bootstrap, "enriched_clicks")}
        if click_ids <= written:
            return
        time.sleep(0.5)
    raise AssertionError(f"clicks not written: {sorted(click_ids - written)[:10]}")


def test_enriched_clicks_with_late_changes_a_kill_and_retention(
    broker_process: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = broker_process.bootstrap
    shop = generate(7, minutes=80)
    checkpoint = tmp_path / "checkpoint"
    # A: the capture lags ten minutes behind the clickstream (one batch: all is there).
    produced = phase(bootstrap, shop, 1, cdc=(-1, 30), clicks=(-1, 40))
    pipeline = PipelineProcess.start(tmp_path, "enriched_clicks", bootstrap, checkpoint)
    wait_for(pipeline, bootstrap, produced)
    # B: the changes of minutes 30-40 arrive after the clicks they apply to.
    produced |= phase(bootstrap, shop, 2, cdc=(30, 55), clicks=(40, 60))
    wait_for(pipeline, bootstrap, produced)
    produced |= phase(bootstrap, shop, 3, cdc=(55, 65), clicks=(60, 70))
    time.sleep(0.5)
    pipeline.kill()  # kill -9, likely in the middle of a batch
    produced |= phase(bootstrap, shop, 4, cdc=(65, 81), clicks=(70, 81))  # while down
    pipeline = PipelineProcess.start(tmp_path, "enriched_clicks", bootstrap, checkpoint)
    wait_for(pipeline, bootstrap, produced)
    # Retention: the watermark jumps to 198 minutes, the horizon to 138; the next batch,
    # under that watermark, fires the timers; then clicks older than the horizon arrive.
    far = [
        {"click_id": f"far-{i}", "search_id": None, "user_id": "far", "product_id": "p0",
         "ts": BASE + 200 * MINUTE}
        for i in range(2)
    ]  # fmt: skip
    for click in far:
        produce_events(bootstrap, "clicks", [click])
        wait_for(pipeline, bootstrap, {click["click_id"]})
    # The as-of join's retention: a user's history is kept from its latest change (in
    # changelog order) valid at the horizon; a click before that change's time needs a
    # version discarded if there was an older one (nothing is before a snapshot row).
    horizon = BASE + 138 * MINUTE
    history: dict[str, list[tuple[int, bool]]] = defaultdict(list)
    for ts, key, value in shop.users.records:  # in changelog order
        if value is not None and ts <= horizon:
            history[json.loads(key)["user_id"]].append((ts, json.loads(value)["op"] == "r"))

    def discarded(user: str, ts: int) -> bool:
        last_ts, snapshot = history[user][-1]
        return len(history[user]) > 1 and not snapshot and ts < last_ts

    inexact_user = next(u for u in sorted(history) if discarded(u, BASE + 70 * MINUTE))
    exact_user = next(u for u in sorted(history) if not discarded(u, BASE + 75 * MINUTE))
    stragglers = [
        {"click_id": "late-x", "search_id": None, "user_id": inexact_user, "product_id": "p1",
         "ts": BASE + 70 * MINUTE},
        {"click_id": "late-y", "search_id": None, "user_id": exact_user, "product_id": "p2",
         "ts": BASE + 75 * MINUTE},
    ]  # fmt: skip
    produce_events(bootstrap, "clicks", stragglers)
    wait_for(pipeline, bootstrap, {"late-x", "late-y"})
    assert pipeline.stop() == 0, pipeline.log()

    all_clicks = shop.clicks + far + stragglers
    records = read_json(bootstrap, "enriched_clicks")
    final = changelog(records)
    assert set(final) == {json.dumps({"click_id": c["click_id"]}) for c in all_clicks}
    # A click before the snapshot's read time has the profile the snapshot saw.
    (early,) = [c for c in all_clicks if c["ts"] < BASE]
    snapshot_row = next(
        envelope["after"]
        for envelope in (json.loads(v) for _, _, v in shop.users.records if v is not None)
        if envelope["op"] == "r" and envelope["after"]["user_id"] == early["user_id"]
    )
    assert snapshot_row["name"] == "n1"  # read at BASE, after the click
    assert final[json.dumps({"click_id": early["click_id"]})] == {
        **early,
        **{name: snapshot_row[name] for name in PROFILE},
    }
    for click in all_clicks:
        if click["click_id"] != "late-x":  # its history was discarded (reported below)
            assert final[json.dumps({"click_id": click["click_id"]})] == enriched(
                click, shop.users.records
            ), click
    # The clicks of phase A were first written with the changes of phase A, then corrected
    # by the late ones; no click is ever written twice in a row with the same value.
    by_click: dict[str, list[Any]] = defaultdict(list)
    for record in records:
        by_click[record.key["click_id"]].append(record.value)
    phase_a = [(ts, k, v) for ts, k, v in shop.users.records if ts < BASE + 30 * MINUTE]
    corrected = 0
    for click in between(shop, -1, 40)[1]:
        written = by_click[click["click_id"]]
        assert written[0] == enriched(click, phase_a), click
        corrected += written[0] != written[-1]
    assert corrected >= 3
    assert all(a != b for values in by_click.values() for a, b in itertools.pairwise(values))
    # Late clicks: reported, with the reason.
    late = read_json(bootstrap, "enriched_clicks_late")
    assert sorted(r.key["click_id"] for r in late) == ["late-x", "late-y"]
    reasons = {r.key["click_id"]: r.value.pop("reason") for r in late}
    assert sorted((r.value for r in late), key=lambda v: v["click_id"]) == stragglers
    assert "may be wrong" in reasons["late-x"] and "may be wrong" not in reasons["late-y"]
    assert f"behind the watermark {BASE + 198 * MINUTE}" in reasons["late-y"]
