"""``riverbed cdc run --method trigger`` against a real PostgreSQL and a real broker: the
same topics and format as the log-based capture, changes in commit order per row, nothing
lost across a kill -9 (duplicates, if any, carry the same position and are dropped the way
the README tells consumers to)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from riverbed.testing.postgres import PostgresCluster, database, sql
from tests.support.brokers import BrokerProcess
from tests.support.capture import (
    Capture,
    Change,
    check_counter_runs,
    counter_rows,
    create_counters,
    fold,
    read_topic,
    start_writing_counters,
    wait_for_changes,
)


def _capture(
    tmp_path: Path, dsn: str, bootstrap: str, prefix: str, *extra: str, method: str = "trigger"
) -> Capture:
    return Capture.start(
        tmp_path,
        "--dsn", dsn, "--bootstrap", bootstrap, "--prefix", prefix, "--method", method,
        "--tables", "public.counters", "--poll-ms", "50", *extra,
    )  # fmt: skip


def deduplicated(changes: list[Change]) -> list[Change]:
    """The consumer's rule from the README: per key, skip an event whose (source.commitLsn,
    source.lsn) is not above the last one applied; snapshot rows always apply, and a
    tombstone goes with its delete."""
    last: dict[str, tuple[int, int]] = {}
    kept: list[Change] = []
    skipping = False
    for change in changes:
        key = json.dumps(change.key, sort_keys=True)
        if change.value is None:
            if not skipping:
                kept.append(change)
            continue
        source = change.value["source"]
        position = (source["commitLsn"], source["lsn"])
        skipping = key in last and position <= last[key] and change.op != "r"
        if not skipping:
            last[key] = position
            kept.append(change)
    return kept


def test_trigger_capture_under_writes_and_kill_9(
    postgres: PostgresCluster, broker_process: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = broker_process.bootstrap
    with database(postgres) as dsn:
        # Writes go on during the installation of the triggers and the snapshot.
        writer = start_writing_counters(dsn, 5_000, seed=3)
        capture = _capture(tmp_path, dsn, bootstrap, "shop")
        capture.wait_for("draining")
        time.sleep(1.0)
        capture.kill()
        time.sleep(0.5)  # changes while down wait in the audit table
        capture = _capture(tmp_path, dsn, bootstrap, "shop")
        capture.wait_for("draining")
        time.sleep(1.0)
        writer.finish()
        try:
            changes = wait_for_changes(
                bootstrap,
                "shop.public.counters",
                lambda c: fold(c) == counter_rows(dsn),
            )
        finally:
            assert capture.stop() == 0, capture.log()
        assert "snapshot of public.counters" not in capture.log()  # only the first run's
        ops = check_counter_runs(deduplicated(changes))
        # One snapshot: each row read once (how many depends on how long the start took).
        reads = [json.dumps(c.key) for c in deduplicated(changes) if c.op == "r"]
        assert len(set(reads)) == len(reads) > 4_900 and ops["u"] > 200, ops
        cursor = sql(dsn).cursor()
        cursor.execute("SELECT count(*) FROM riverbed_cdc.riverbed_shop")
        assert cursor.fetchone()[0] == 0  # drained


def test_both_methods_give_the_same_events(
    postgres: PostgresCluster, broker_process: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = broker_process.bootstrap
    with database(postgres) as dsn:
        connection = sql(dsn)
        cursor = connection.cursor()
        cursor.execute(
            "CREATE TABLE counters (id int PRIMARY KEY, n bigint NOT NULL, note text, "
            "amount numeric(12,3), flag boolean, at timestamptz, day date, tags text[], "
            "doc jsonb, ratio float8); "
            "INSERT INTO counters VALUES (1, 0, 'a\tb\\c \"q\" (x,y)', 1.5, true, "
            "'2026-03-01 10:00:00.25+02', '2026-03-01', '{a,\"b c\"}', '{\"k\": [1]}', 0.1)"
        )
        log = _capture(tmp_path, dsn, bootstrap, "viaLog", "--slot", "vialog", method="log")
        trigger = _capture(tmp_path, dsn, bootstrap, "viaTrigger")
        log.wait_for("streaming from slot")
        trigger.wait_for("draining")
        cursor.execute("SET TimeZone = 'America/New_York'")  # the writer's zone must not matter
        cursor.execute(
            "BEGIN; INSERT INTO counters VALUES (2, 0, NULL, NULL, NULL, now(), NULL, NULL, "
            "NULL, 'NaN'); UPDATE counters SET n = n + 1, note = '' WHERE id = 1; COMMIT"
        )
        cursor.execute("UPDATE counters SET id = 3 WHERE id = 2")
        cursor.execute("ALTER TABLE counters ADD COLUMN extra text DEFAULT 'e'")
        cursor.execute("UPDATE counters SET extra = 'f' WHERE id = 1")
        cursor.execute("DELETE FROM counters WHERE id = 1")
        cursor.execute("TRUNCATE counters")
        try:
            by_log = wait_for_changes(bootstrap, "viaLog.public.counters", lambda c: len(c) >= 10)
            by_trigger = wait_for_changes(
                bootstrap, "viaTrigger.public.counters", lambda c: len(c) >= 10
            )
        finally:
            assert log.stop() == 0, log.log()
            assert trigger.stop() == 0, trigger.log()

        def comparable(change: Change) -> tuple[Any, ...]:
            if change.value is None:
                return (change.key, None)
            value = change.value
            return (change.key, value["op"], value["before"], value["after"],
                    value["source"]["table"], value["source"]["snapshot"])  # fmt: skip

        assert [comparable(c) for c in by_trigger] == [comparable(c) for c in by_log]
        assert len(by_log) == 10
        first = by_log[0].value["after"]
        assert first == {
            "id": 1, "n": 0, "note": 'a\tb\\c "q" (x,y)', "amount": "1.500", "flag": True,
            "at": "2026-03-01T08:00:00.250000Z", "day": "2026-03-01", "tags": '{a,"b c"}',
            "doc": '{"k": [1]}', "ratio": 0.1,
        }  # fmt: skip
        assert by_log[1].value["after"]["ratio"] == "NaN"
        assert by_log[2].value["source"]["txId"] == by_log[1].value["source"]["txId"]
        assert by_trigger[2].value["source"]["txId"] == by_trigger[1].value["source"]["txId"]


def test_drop_removes_the_triggers_and_the_audit_table(
    postgres: PostgresCluster, broker_process: BrokerProcess, tmp_path: Path
) -> None:
    with database(postgres) as dsn:
        create_counters(dsn, 10)
        capture = _capture(tmp_path, dsn, broker_process.bootstrap, "shop", "--drop-slot")
        capture.wait_for("draining")
        assert capture.stop() == 0, capture.log()
        cursor = sql(dsn).cursor()
        cursor.execute("SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'riverbed_cdc%'")
        assert cursor.fetchone()[0] == 0
        cursor.execute("SELECT to_regclass('riverbed_cdc.riverbed_shop')")
        assert cursor.fetchone()[0] is None
        cursor.execute("UPDATE counters SET n = 9")  # no trigger left to fail or record it
        assert [c.op for c in read_topic(broker_process.bootstrap, "shop.public.counters")] == [
            "r"
        ] * 10


def test_an_audit_row_not_written_by_the_trigger_stops_the_capture_and_is_kept(
    postgres: PostgresCluster, broker_process: BrokerProcess, tmp_path: Path
) -> None:
    with database(postgres) as dsn:
        create_counters(dsn, 3)
        capture = _capture(tmp_path, dsn, broker_process.bootstrap, "odd")
        capture.wait_for("draining")
        cursor = sql(dsn).cursor()
        cursor.execute("UPDATE counters SET n = 7 WHERE id = 1")
        cursor.execute(
            "INSERT INTO riverbed_cdc.riverbed_odd (schema_name, table_name, op, new_row) "
            "VALUES ('public', 'counters', 'c', 'not a record')"
        )
        assert capture.process.wait(timeout=60) == 1, capture.log()
        log = capture.log()
        assert "cannot read row" in log and "not a record" in log, log
        assert "Traceback" not in log, log
        cursor.execute("SELECT op, new_row FROM riverbed_cdc.riverbed_odd")
        assert cursor.fetchall() == [("c", "not a record")]  # kept, for a person to look at
        changes = read_topic(broker_process.bootstrap, "odd.public.counters")
        assert [c.op for c in changes] == ["r", "r", "r", "u"]  # the update before it went out
