"""``riverbed cdc``'s clear errors: each user mistake one line on stderr, no traceback; and
a capture at work prints riverbed's lines only."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from riverbed.testing.postgres import PostgresCluster, database, sql
from tests.support.brokers import BrokerProcess
from tests.support.capture import Capture, fold, read_topic, run_capture, wait_for_changes
from tests.support.cli import library_noise
from tests.support.metrics import scrape


def _fails(tmp_path: Path, *args: str, code: int = 1) -> str:
    result = run_capture(tmp_path, *args)
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stderr


def _run_args(dsn: str, bootstrap: str, tables: str, *extra: str) -> tuple[str, ...]:
    return ("run", "--dsn", dsn, "--bootstrap", bootstrap, "--prefix", "shop",
            "--tables", tables, "--connect-timeout-ms", "3000", *extra)  # fmt: skip


@pytest.fixture
def dsn(postgres: PostgresCluster) -> str:
    with database(postgres) as dsn:
        sql(dsn).cursor().execute(
            "CREATE TABLE users (user_id text PRIMARY KEY, name text); "
            "CREATE TABLE events (at timestamptz, what text, seq int NOT NULL); "
            "INSERT INTO events VALUES ('2026-01-01', 'a', 1), ('2026-01-02', 'b', 2); "
            "CREATE ROLE app LOGIN; GRANT SELECT ON users TO app"
        )
        yield dsn
        sql(dsn).cursor().execute("DROP OWNED BY app; DROP ROLE app")


def test_an_unreachable_database(tmp_path: Path, broker_process: BrokerProcess) -> None:
    stderr = _fails(
        tmp_path, *_run_args("postgresql://postgres@127.0.0.1:1/x", broker_process.bootstrap, "t")
    )
    assert stderr.startswith("riverbed cdc: cannot connect to the database:"), stderr
    assert "Connection refused" in stderr or "connection" in stderr.lower()


def test_an_unreachable_broker(tmp_path: Path, dsn: str) -> None:
    stderr = _fails(tmp_path, *_run_args(dsn, "127.0.0.1:1", "users"))
    assert "riverbed cdc: no broker reachable at 127.0.0.1:1 within 3 s" in stderr, stderr


def test_unknown_table_and_table_without_a_key(
    tmp_path: Path, dsn: str, broker_process: BrokerProcess
) -> None:
    stderr = _fails(tmp_path, *_run_args(dsn, broker_process.bootstrap, "users,public.nope"))
    assert "riverbed cdc: table public.nope does not exist" in stderr, stderr
    stderr = _fails(tmp_path, *_run_args(dsn, broker_process.bootstrap, "events"))
    assert "table public.events has no primary key" in stderr, stderr
    assert "--key public.events=col1,col2" in stderr


def test_a_table_without_a_primary_key_is_captured_with_a_given_key(
    tmp_path: Path, dsn: str, broker_process: BrokerProcess
) -> None:
    args = _run_args(dsn, broker_process.bootstrap, "events", "--key", "events=seq")
    stderr = _fails(tmp_path, *args)
    assert "--key public.events=seq needs the whole old row: ALTER TABLE public.events " in stderr
    sql(dsn).cursor().execute("ALTER TABLE events REPLICA IDENTITY FULL")
    capture = Capture.start(tmp_path, *args[1:])
    capture.wait_for("streaming from slot")
    assert capture.stop() == 0
    records = read_topic(broker_process.bootstrap, "shop.public.events")
    assert [r.key for r in records] == [{"seq": 1}, {"seq": 2}]
    assert records[0].value["after"] == {
        "at": "2026-01-01T00:00:00.000000Z", "what": "a", "seq": 1
    }  # fmt: skip


def test_missing_privileges(tmp_path: Path, dsn: str, broker_process: BrokerProcess) -> None:
    as_app = dsn.replace("postgres@", "app@")
    stderr = _fails(tmp_path, *_run_args(as_app, broker_process.bootstrap, "users"))
    assert "riverbed cdc: the user may not replicate: ALTER ROLE" in stderr, stderr
    sql(dsn).cursor().execute("ALTER ROLE app REPLICATION")
    stderr = _fails(tmp_path, *_run_args(as_app, broker_process.bootstrap, "users,events"))
    assert "the user may not read public.events" in stderr, stderr


def test_wal_level_not_logical(tmp_path: Path, broker_process: BrokerProcess) -> None:
    cluster = PostgresCluster.start(wal_level="replica")
    try:
        sql(cluster.dsn).cursor().execute("CREATE TABLE users (user_id text PRIMARY KEY)")
        stderr = _fails(tmp_path, *_run_args(cluster.dsn, broker_process.bootstrap, "users"))
        assert "riverbed cdc: wal_level is 'replica'; logical decoding needs 'logical'" in stderr
        # The trigger method is what such a database can use.
        capture = Capture.start(
            tmp_path,
            *_run_args(cluster.dsn, broker_process.bootstrap, "users", "--method", "trigger")[1:],
        )
        capture.wait_for("draining")
        assert capture.stop() == 0, capture.log()
    finally:
        cluster.stop()


def test_usage_errors(tmp_path: Path) -> None:
    stderr = _fails(tmp_path, *_run_args("x", "y", "users", "--slot", "Bad-Name"), code=2)
    assert "invalid --slot 'Bad-Name'" in stderr
    stderr = _fails(tmp_path, *_run_args("x", "y", "users", "--snapshot", "sometimes"), code=2)
    assert "invalid choice: 'sometimes'" in stderr
    stderr = _fails(tmp_path, *_run_args("x", "y", "users", "--key", "events"), code=1)
    assert "--key expects schema.table=col1,col2" in stderr
    stderr = _fails(tmp_path, *_run_args("x", "y", " , "), code=2)
    assert "--tables names no table" in stderr
    stderr = _fails(tmp_path, *_run_args("host=/nonexistent port=1", "y", "users"))
    assert "cannot connect to the database" in stderr
    stderr = _fails(tmp_path, *_run_args("x", "y", "users", "--metrics", "9644"), code=2)
    assert "--metrics: expected HOST:PORT, got '9644'" in stderr
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = f"127.0.0.1:{holder.getsockname()[1]}"
        stderr = _fails(tmp_path, *_run_args("x", "y", "users", "--metrics", taken))
        assert f"riverbed cdc: cannot serve metrics on {taken}: Address already in use" in stderr


def test_status_of_an_unknown_slot(tmp_path: Path, dsn: str) -> None:
    stderr = _fails(tmp_path, "status", "--dsn", dsn, "--slot", "nope")
    assert "riverbed cdc: no logical replication slot 'nope'" in stderr
    result = run_capture(tmp_path, "status", "--dsn", dsn)
    assert result.returncode == 0 and result.stdout.split()[:3] == ["SLOT", "DATABASE", "ACTIVE"]


def test_a_capture_prints_riverbed_lines_only(
    tmp_path: Path, dsn: str, broker_process: BrokerProcess
) -> None:
    """A capture that does real work (a snapshot, changes streamed, a clean stop): its stderr
    holds riverbed's lines only, none of librdkafka's (its clients log to riverbed.cdc's
    logger, which shows warnings and errors only). Its ``--metrics`` count the snapshot and
    the changes."""
    bootstrap = broker_process.bootstrap
    sql(dsn).cursor().execute("INSERT INTO users VALUES ('u1', 'Ann'), ('u2', 'Bob')")
    capture = Capture.start(
        tmp_path, *_run_args(dsn, bootstrap, "users", "--metrics", "127.0.0.1:0")[1:]
    )
    capture.wait_for("streaming from slot")
    url = re.search(r"riverbed cdc: metrics on (\S+)", capture.log())
    assert url is not None, capture.log()
    snapshot = scrape(url.group(1))
    assert snapshot.value("riverbed_cdc_snapshot_rows_total") == 2
    assert snapshot.value("riverbed_cdc_snapshot_tables") == 1
    assert snapshot.value("riverbed_cdc_snapshot_tables_done") == 1
    assert snapshot.value("riverbed_cdc_snapshot_running") == 0
    assert snapshot.value("riverbed_cdc_changes_total") == 0
    sql(dsn).cursor().execute(
        "UPDATE users SET name = 'Annie' WHERE user_id = 'u1'; "
        "DELETE FROM users WHERE user_id = 'u2'"
    )
    # 2 snapshot rows, the update, the delete and its tombstone
    wait_for_changes(bootstrap, "shop.public.users", lambda changes: len(changes) >= 5)
    streamed = scrape(url.group(1))
    assert streamed.value("riverbed_cdc_changes_total") == 2  # the tombstone is no change
    assert 0 < streamed.value("riverbed_cdc_lag_seconds") < 30  # seconds, not ms
    assert streamed.value("riverbed_cdc_slot_lag_bytes") >= 0
    assert streamed.has("riverbed_cdc_confirmed_lsn")
    assert capture.stop() == 0, capture.log()
    assert fold(read_topic(bootstrap, "shop.public.users")) == {
        '{"user_id": "u1"}': {"user_id": "u1", "name": "Annie"}
    }
    log = capture.log()
    assert library_noise(log) == []
    assert [line for line in log.splitlines() if not line.startswith("riverbed cdc: ")] == []
