"""``riverbed cdc run`` (log-based) against a real PostgreSQL and a real broker.

The strongest check is the counter table: every update adds 1 to a row's ``n``, so in the
topic each key's values must run r/c, then +1 at every u, until a d. A change missed or
produced twice, around the snapshot or across a kill -9, breaks the run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, ConfigResource

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
    run_capture,
    snapshot_reads,
    start_writing_counters,
    wait_for_changes,
)

COUNTERS = "shop.public.counters"


def _capture(
    tmp_path: Path,
    dsn: str,
    bootstrap: str,
    *extra: str,
    tables: str = "public.counters",
    heartbeat: tuple[str, ...] = ("--heartbeat-ms", "200"),
) -> Capture:
    return Capture.start(
        tmp_path,
        "--dsn", dsn, "--bootstrap", bootstrap, "--prefix", "shop", "--tables", tables,
        *heartbeat, *extra,
    )  # fmt: skip


def _stream_then_stop(tmp_path: Path, dsn: str, bootstrap: str, *extra: str) -> Capture:
    """Run the capture until it streams, then stop it cleanly (its log stays readable)."""
    capture = _capture(tmp_path, dsn, bootstrap, *extra)
    capture.wait_for("streaming from slot")
    assert capture.stop() == 0, capture.log()
    return capture


def _topic_equals_table(bootstrap: str, dsn: str) -> list[Change]:
    expected = counter_rows(dsn)
    return wait_for_changes(bootstrap, COUNTERS, lambda changes: fold(changes) == expected)


def test_snapshot_under_writes_then_streaming_misses_and_doubles_nothing(
    postgres: PostgresCluster, broker_process: BrokerProcess, tmp_path: Path
) -> None:
    with database(postgres) as dsn:
        # Writes go on while the slot is created and the snapshot is read.
        writer = start_writing_counters(dsn, 20_000, seed=1)
        time.sleep(0.3)
        capture = _capture(tmp_path, dsn, broker_process.bootstrap)
        try:
            capture.wait_for("streaming from slot")
            time.sleep(1.5)
            writer.finish()
            changes = _topic_equals_table(broker_process.bootstrap, dsn)
        finally:
            assert capture.stop() == 0, capture.log()
        ops = check_counter_runs(changes)
        # Every row as of the slot's consistent point (the writer had been at work already),
        # read once, before anything streamed.
        assert snapshot_reads(changes) > 19_900, ops
        assert ops["u"] > 100 and ops.get("c", 0) > 5 and ops.get("d", 0) > 5, ops
        snapshot = [c for c in changes if c.op == "r"]
        assert [c.value["source"]["snapshot"] for c in snapshot[-2:]] == ["true", "last"]
        streamed = [c for c in changes if c.op in ("c", "u", "d")]
        assert all(c.value["source"]["snapshot"] == "false" for c in streamed)
        # The snapshot rows come first, then the changes, ordered by commit.
        assert changes.index(snapshot[-1]) == len(snapshot) - 1
        commits = [
            int(c.headers["riverbed.cdc.position"].split(b":")[0]) for c in changes if c.op != "r"
        ]
        assert commits == sorted(commits)
        assert "stopped:" in capture.log()


def test_operations_multi_statement_transactions_and_the_envelope(
    postgres: PostgresCluster, broker_process: BrokerProcess, tmp_path: Path
) -> None:
    with database(postgres) as dsn:
        connection = sql(dsn)
        cursor = connection.cursor()
        cursor.execute(
            "CREATE TABLE orders (order_id text PRIMARY KEY, user_id text, quantity int, "
            "total numeric(10,2), paid boolean, created_at timestamptz)"
        )
        cursor.execute(
            "INSERT INTO orders VALUES ('o1', 'u1', 1, 9.90, false, '2026-01-01 12:00+00')"
        )
        capture = _capture(tmp_path, dsn, broker_process.bootstrap, tables="orders", heartbeat=())
        try:
            capture.wait_for("streaming from slot")
            started_ms = int(time.time() * 1000)
            cursor.execute("INSERT INTO orders VALUES ('o2', 'u2', 2, 20.00, true, now())")
            cursor.execute(
                "BEGIN; UPDATE orders SET quantity = 3 WHERE order_id = 'o1'; "
                "INSERT INTO orders VALUES ('o3', 'u1', 1, 0.10, false, now()); "
                "DELETE FROM orders WHERE order_id = 'o2'; COMMIT"
            )
            cursor.execute("UPDATE orders SET order_id = 'o9' WHERE order_id = 'o3'")
            cursor.execute("BEGIN; UPDATE orders SET paid = true; ROLLBACK")  # never seen
            changes = wait_for_changes(
                broker_process.bootstrap, "shop.public.orders", lambda c: len(c) >= 9
            )
        finally:
            assert capture.stop() == 0, capture.log()
        assert [c.op for c in changes] == ["r", "c", "u", "c", "d", None, "d", None, "c"]
        assert _config(broker_process.bootstrap, "shop.public.orders")["cleanup.policy"] == (
            "compact"
        )
        snapshot, created, updated, created3, deleted, tombstone = changes[:6]
        assert snapshot.key == {"order_id": "o1"}
        assert snapshot.value["after"] == {
            "order_id": "o1", "user_id": "u1", "quantity": 1, "total": "9.90", "paid": False,
            "created_at": "2026-01-01T12:00:00.000000Z",
        }  # fmt: skip
        assert created.value["after"]["total"] == "20.00" and created.value["after"]["paid"]
        assert created.value["before"] is None
        source = created.value["source"]
        assert source["db"] == dsn.rsplit("/", 1)[1] and source["schema"] == "public"
        assert source["table"] == "orders" and source["snapshot"] == "false"
        assert started_ms - 1000 <= source["ts_ms"] <= int(time.time() * 1000)
        assert isinstance(source["lsn"], int) and isinstance(source["txId"], int)
        # The three statements of one transaction: one txId, one commit time, in order.
        transaction = [updated, created3, deleted, tombstone]
        assert {c.value["source"]["txId"] for c in transaction[:3]} == {
            updated.value["source"]["txId"]
        }
        assert updated.value["source"]["txId"] != source["txId"]
        lsns = [c.value["source"]["lsn"] for c in transaction[:3]]
        assert lsns == sorted(lsns)
        assert updated.value["before"] is None  # REPLICA IDENTITY DEFAULT
        assert updated.value["after"]["quantity"] == 3
        assert deleted.key == {"order_id": "o2"} and deleted.value["before"] == {"order_id": "o2"}
        assert tombstone.key == {"order_id": "o2"} and tombstone.value is None
        # A key change: a delete of the old key, its tombstone, a create of the new one.
        old, old_tombstone, new = changes[6:9]
        assert old.op == "d" and old.key == {"order_id": "o3"} and old_tombstone.value is None
        assert new.op == "c" and new.key == {"order_id": "o9"}
        assert fold(changes) == {
            json.dumps(k, sort_keys=True): v
            for k, v in (
                ({"order_id": "o1"}, {**snapshot.value["after"], "quantity": 3}),
                ({"order_id": "o9"}, {**created3.value["after"], "order_id": "o9"}),
            )
        }


def _config(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return {name: entry.value for name, entry in entries.items()}


def test_schema_change_full_identity_toast_and_truncate(
    postgres: PostgresCluster, broker_process: BrokerProcess, tmp_path: Path
) -> None:
    with database(postgres) as dsn:
        connection = sql(dsn)
        cursor = connection.cursor()
        big = "x" * 100_000  # stored out of line (TOAST), compressed
        cursor.execute(
            "CREATE TABLE docs (id int PRIMARY KEY, title text, body text); "
            "ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL; "
            "CREATE TABLE notes (id int PRIMARY KEY, title text, body text); "
            "ALTER TABLE notes REPLICA IDENTITY FULL; "
            "ALTER TABLE notes ALTER COLUMN body SET STORAGE EXTERNAL"
        )
        capture = _capture(
            tmp_path, dsn, broker_process.bootstrap, tables="public.docs,public.notes", heartbeat=()
        )
        try:
            capture.wait_for("streaming from slot")
            for table in ("docs", "notes"):
                cursor.execute(f"INSERT INTO {table} VALUES (1, 'a', %s)", (big,))
                cursor.execute(f"UPDATE {table} SET title = 'b' WHERE id = 1")  # body unchanged
            cursor.execute("ALTER TABLE docs ADD COLUMN tags text DEFAULT 'none'")
            cursor.execute("INSERT INTO docs VALUES (2, 'c', 'small', 'new')")
            cursor.execute("UPDATE docs SET tags = 'set' WHERE id = 1")
            cursor.execute("TRUNCATE notes")
            docs = wait_for_changes(
                broker_process.bootstrap, "shop.public.docs", lambda c: len(c) >= 4
            )
            notes = wait_for_changes(
                broker_process.bootstrap, "shop.public.notes", lambda c: len(c) >= 3
            )
        finally:
            assert capture.stop() == 0, capture.log()
        # REPLICA IDENTITY DEFAULT: the unchanged TOAST value is Debezium's placeholder.
        assert docs[0].value["after"]["body"] == big
        assert docs[1].value["after"] == {
            "id": 1, "title": "b", "body": "__debezium_unavailable_value"
        }  # fmt: skip
        # The new column appears in every later event.
        assert docs[2].value["after"] == {"id": 2, "title": "c", "body": "small", "tags": "new"}
        assert docs[3].value["after"]["tags"] == "set"
        # REPLICA IDENTITY FULL: the whole old row, and the unchanged value from it.
        assert notes[1].value["before"] == {"id": 1, "title": "a", "body": big}
        assert notes[1].value["after"] == {"id": 1, "title": "b", "body": big}
        assert notes[2].op == "t" and notes[2].key == {}
        assert notes[2].value["before"] is None and notes[2].value["after"] is None


def test_kill_9_mid_stream_and_changes_while_down_lose_nothing(
    postgres: PostgresCluster, broker_process: BrokerProcess, tmp_path: Path
) -> None:
    with database(postgres) as dsn:
        writer = start_writing_counters(dsn, 2_000, seed=2)
        capture = _capture(tmp_path, dsn, broker_process.bootstrap)
        capture.wait_for("streaming from slot")
        for _ in range(2):
            time.sleep(1.0)
            capture.kill()  # mid-stream: the writer never stops
            time.sleep(0.5)  # changes while the capture is down
            capture = _capture(tmp_path, dsn, broker_process.bootstrap)
            capture.wait_for("resuming from slot")
        time.sleep(1.0)
        writer.finish()
        try:
            changes = _topic_equals_table(broker_process.bootstrap, dsn)
        finally:
            assert capture.stop() == 0, capture.log()
        ops = check_counter_runs(changes)
        # One snapshot, read before anything streamed: a resume after kill -9 reads none.
        # (How many rows it holds depends on how long the first start took.)
        assert snapshot_reads(changes) > 1_950 and ops["u"] > 200, ops
        assert writer.transactions > 300


def test_an_idle_slot_keeps_up_with_the_wal(
    postgres: PostgresCluster, broker_process: BrokerProcess, tmp_path: Path
) -> None:
    with database(postgres) as dsn:
        create_counters(dsn, 10)
        connection = sql(dsn)
        cursor = connection.cursor()
        cursor.execute("CREATE TABLE other (id serial PRIMARY KEY, body text)")
        capture = _capture(tmp_path, dsn, broker_process.bootstrap)
        try:
            capture.wait_for("streaming from slot")
            # WAL written by a table the capture does not follow (about 20 MB).
            for _ in range(20):
                cursor.execute(
                    "INSERT INTO other (body) "
                    "SELECT repeat('w', 1000) FROM generate_series(1, 1000)"
                )
            cursor.execute("SELECT pg_current_wal_lsn()")
            (written,) = cursor.fetchone()
            time.sleep(2.0)  # idle: heartbeats every 200 ms
            cursor.execute(
                "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), "
                "pg_wal_lsn_diff(%s, confirmed_flush_lsn) "
                "FROM pg_replication_slots WHERE slot_name = 'riverbed_shop'",
                (written,),
            )
            lag, behind_written = cursor.fetchone()
            status = _status(dsn)
        finally:
            assert capture.stop() == 0, capture.log()
        assert behind_written <= 0, "the slot is behind the WAL written before the idle period"
        assert lag < 64 * 1024, lag
        assert status["riverbed_shop"]["ACTIVE"] == "yes"
        assert int(status["riverbed_shop"]["LAG_BYTES"]) < 64 * 1024


def _status(dsn: str) -> dict[str, dict[str, str]]:
    result = run_capture(Path("/tmp"), "status", "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    header, *lines = result.stdout.splitlines()
    names = header.split()
    rows = [dict(zip(names, line.split(), strict=True)) for line in lines]
    return {row["SLOT"]: row for row in rows}


def test_drop_slot_on_stop_and_a_new_snapshot_after(
    postgres: PostgresCluster, broker_process: BrokerProcess, tmp_path: Path
) -> None:
    with database(postgres) as dsn:
        create_counters(dsn, 100)
        capture = _stream_then_stop(tmp_path, dsn, broker_process.bootstrap, "--drop-slot")
        assert "dropped slot riverbed_shop" in capture.log()
        cursor = sql(dsn).cursor()
        cursor.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'riverbed_shop'"
        )
        assert cursor.fetchone()[0] == 0
        capture = _stream_then_stop(tmp_path, dsn, broker_process.bootstrap)
        assert "created slot riverbed_shop" in capture.log()
        ops = [c.op for c in read_topic(broker_process.bootstrap, COUNTERS)]
        assert ops == ["r"] * 200  # the second run snapshots again


def test_a_lost_slot_is_an_error_unless_a_new_snapshot_is_asked_for(
    postgres: PostgresCluster, broker_process: BrokerProcess, tmp_path: Path
) -> None:
    with database(postgres) as dsn:
        create_counters(dsn, 10)
        _stream_then_stop(tmp_path, dsn, broker_process.bootstrap)
        cursor = sql(dsn).cursor()
        cursor.execute("SELECT pg_drop_replication_slot('riverbed_shop')")
        cursor.execute("UPDATE counters SET n = 5 WHERE id = 1")  # a change no slot kept
        capture = _capture(tmp_path, dsn, broker_process.bootstrap)
        assert capture.process.wait(60) == 1
        assert "slot riverbed_shop is gone" in capture.log()
        assert "--snapshot when_needed" in capture.log()
        _stream_then_stop(tmp_path, dsn, broker_process.bootstrap, "--snapshot", "when_needed")
        expected = counter_rows(dsn)
        assert fold(read_topic(broker_process.bootstrap, COUNTERS)) == expected


def test_an_interrupted_snapshot_starts_over(
    postgres: PostgresCluster, broker_process: BrokerProcess, tmp_path: Path
) -> None:
    with database(postgres) as dsn:
        create_counters(dsn, 200_000)
        capture = _capture(tmp_path, dsn, broker_process.bootstrap)
        capture.wait_for("created slot")
        time.sleep(0.5)
        capture.kill()  # during the snapshot
        assert "snapshot complete" not in capture.log()
        cursor = sql(dsn).cursor()
        cursor.execute("UPDATE counters SET n = 1 WHERE id <= 10")
        capture = _capture(tmp_path, dsn, broker_process.bootstrap)
        capture.wait_for("streaming from slot", timeout_s=120)
        try:
            assert "has no complete snapshot: starting it over" in capture.log()
            _topic_equals_table(broker_process.bootstrap, dsn)
        finally:
            assert capture.stop() == 0


def test_never_streams_changes_without_a_snapshot(
    postgres: PostgresCluster, broker_process: BrokerProcess, tmp_path: Path
) -> None:
    with database(postgres) as dsn:
        create_counters(dsn, 50)
        capture = _capture(tmp_path, dsn, broker_process.bootstrap, "--snapshot", "never")
        try:
            capture.wait_for("streaming from slot")
            sql(dsn).cursor().execute("UPDATE counters SET n = 1 WHERE id = 7")
            changes = wait_for_changes(broker_process.bootstrap, COUNTERS, lambda c: len(c) >= 1)
        finally:
            assert capture.stop() == 0
        assert [(c.op, c.key) for c in changes] == [("u", {"id": 7})]
