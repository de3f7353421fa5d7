"""``riverbed workload shop`` against a real broker (a child process) and a real PostgreSQL."""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from confluent_kafka.admin import AdminClient

from riverbed.cli import workload_command
from riverbed.client.partitioner import murmur2_partition
from riverbed.eventsourcing.shop.carts import FORMAT
from riverbed.eventsourcing.shop.carts import TOPICS as CART_TOPICS
from riverbed.testing.postgres import PostgresCluster, database
from riverbed.testing.topic_reader import count_to_end, read_to_end
from riverbed.workloads.cart_commands import COMMANDS_TOPIC, Intent, commands
from riverbed.workloads.oltp import PRIMARY_KEYS, SCHEMAS, OpKind, operations
from riverbed.workloads.shop import TOPICS, ShopConfig, events
from tests.support.brokers import BrokerProcess
from tests.support.cart_workload import check_answers
from tests.support.carts import check_the_log, wait_for_answers
from tests.support.cli import ChildProcess

START_MS = 1_767_225_600_000
SUMMARY = re.compile(
    r"riverbed workload: (?P<events>\d+) events \(page_views (?P<page_views>\d+), "
    r"searches (?P<searches>\d+), clicks (?P<clicks>\d+), payments (?P<payments>\d+); "
    r"(?P<late>\d+) late stragglers\), event time (?P<first>\S+) to (?P<last>\S+)"
    r"(, (?P<ops>\d+) database operations \((?P<inserts>\d+) inserts, (?P<updates>\d+) "
    r"updates, (?P<deletes>\d+) deletes\))?"
    r"(, (?P<commands>\d+) cart commands for (?P<carts>\d+) carts \((?P<racing>\d+) racing, "
    r"(?P<invalid>\d+) invalid, (?P<resent>\d+) re-sent\))?"
    r", in (?P<seconds>[\d.]+) s \(\d+ events/s\)\n"
)


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "riverbed.cli.main", "workload", "shop", *args]


def workload(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(*args), capture_output=True, text=True, timeout=timeout_s, check=False
    )


def summary_of(stdout: str) -> dict[str, str]:
    match = SUMMARY.fullmatch(stdout)
    assert match, stdout
    return {k: v for k, v in match.groupdict().items() if v is not None}


def read_records(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    """Every record of partition 0 of ``topic``, up to its end."""
    records = []
    for record in read_to_end(bootstrap, topic, partitions=1, timeout_s=30):
        assert record.key is not None and record.value is not None
        records.append((record.key, record.value))
    return records


def test_the_events_reach_their_topics_as_generated(broker_process: BrokerProcess) -> None:
    settings = ("--seed", "7", "--users", "1000", "--event-rate", "50", "--late-fraction",
                "0.05", "--late-by-ms", "5000", "--start-ms", str(START_MS))  # fmt: skip
    result = workload("--bootstrap", broker_process.bootstrap, "--events", "3000", "--rate", "0",
                      *settings)  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = summary_of(result.stdout)
    config = ShopConfig(seed=7, users=1000, event_rate=50, late_fraction=0.05, late_by_ms=5000,
                        start_ms=START_MS)  # fmt: skip
    expected = list(itertools.islice(events(config), 3000))
    assert summary["events"] == "3000"
    assert int(summary["late"]) == sum(e.straggler for e in expected) > 0
    assert summary["first"] == "2026-01-01T00:00:00Z"
    for topic in TOPICS:
        records = read_records(broker_process.bootstrap, topic)
        wanted = [e for e in expected if e.topic == topic]
        assert int(summary[topic]) == len(records) == len(wanted) > 0, topic
        assert [(json.loads(k), json.loads(v)) for k, v in records] == [
            (e.key, e.value) for e in wanted
        ]
        key, value = records[0]
        assert key == json.dumps(wanted[0].key, separators=(",", ":")).encode()
        assert value == json.dumps(wanted[0].value, separators=(",", ":")).encode()


def test_it_keeps_the_rate_and_stops_cleanly_at_sigterm(broker_process: BrokerProcess) -> None:
    process = subprocess.Popen(
        command("--bootstrap", broker_process.bootstrap, "--events", "0", "--rate", "400"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        assert "riverbed workload: producing the shop workload" in process.stderr.readline()
        time.sleep(1.5)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=20)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, stderr
    summary = summary_of(stdout)
    sent, seconds = int(summary["events"]), float(summary["seconds"])
    assert seconds > 1
    # "in 1.4 s": rounded to a tenth; one event is sent at once, the rest 1/400 s apart
    assert 400 * (seconds - 0.05) * 0.8 <= sent <= 400 * (seconds + 0.05) + 1
    received = sum(len(read_records(broker_process.bootstrap, t)) for t in TOPICS)
    assert received == sent  # all acknowledged before it exited


def table_contents(dsn: str) -> dict[str, dict[str, dict[str, Any]]]:
    connection = psycopg2.connect(dsn)
    try:
        cursor = connection.cursor()
        tables: dict[str, dict[str, dict[str, Any]]] = {}
        for table, columns in SCHEMAS.items():
            names = [name for name, _ in columns]
            cursor.execute(f"SELECT {', '.join(names)} FROM public.{table}")
            rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
            for row in rows:
                if isinstance(row.get("created_at"), datetime.datetime):
                    row["created_at"] = int(row["created_at"].timestamp() * 1000)
            tables[table] = {row[PRIMARY_KEYS[table]]: row for row in rows}
        return tables
    finally:
        connection.close()


def column_types(dsn: str) -> dict[str, list[tuple[str, str]]]:
    connection = psycopg2.connect(dsn)
    try:
        cursor = connection.cursor()
        cursor.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'public' ORDER BY table_name, ordinal_position"
        )
        found: dict[str, list[tuple[str, str]]] = {}
        for table, column, kind in cursor.fetchall():
            found.setdefault(table, []).append((column, kind))
        cursor.execute(
            "SELECT tc.table_name, kcu.column_name FROM information_schema.table_constraints tc "
            "JOIN information_schema.key_column_usage kcu USING (constraint_name, table_schema) "
            "WHERE tc.table_schema = 'public' AND tc.constraint_type = 'PRIMARY KEY'"
        )
        assert dict(cursor.fetchall()) == PRIMARY_KEYS
        return found
    finally:
        connection.close()


def model(config: ShopConfig, count: int) -> dict[str, dict[str, dict[str, Any]]]:
    """The tables after the first ``count`` operations of ``config``."""
    tables: dict[str, dict[str, dict[str, Any]]] = {table: {} for table in SCHEMAS}
    for op in itertools.islice(operations(config), count):
        if op.kind is OpKind.INSERT:
            tables[op.table][op.key] = dict(op.values)
        elif op.kind is OpKind.UPDATE:
            tables[op.table][op.key].update(op.values)
        else:
            del tables[op.table][op.key]
    return tables


def test_with_a_dsn_it_writes_the_tables(
    postgres: PostgresCluster, broker_process: BrokerProcess
) -> None:
    config = ShopConfig(seed=3, users=1000, products=30, event_rate=2, oltp_rate=0.5,
                        start_ms=START_MS)  # fmt: skip
    args = ("--bootstrap", broker_process.bootstrap, "--events", "4000", "--rate", "0",
            "--seed", "3", "--users", "1000", "--products", "30", "--event-rate", "2",
            "--oltp-rate", "0.5", "--start-ms", str(START_MS))  # fmt: skip
    with database(postgres) as dsn:
        result = workload(*args, "--dsn", dsn)
        assert result.returncode == 0, result.stderr
        summary = summary_of(result.stdout)
        ops = int(summary["ops"])
        assert ops == sum(int(summary[k]) for k in ("inserts", "updates", "deletes"))
        # 4000 events at 2/s: 2000 s of event time, about 1000 changes after the initial load
        assert 800 < ops - 1030 < 1200, summary
        assert column_types(dsn) == {
            "orders": [("order_id", "text"), ("user_id", "text"), ("product_id", "text"),
                       ("quantity", "integer"), ("status", "text"),
                       ("created_at", "timestamp with time zone")],
            "products": [("product_id", "text"), ("title", "text"), ("category", "text"),
                         ("price_cents", "bigint")],
            "users": [("user_id", "text"), ("name", "text"), ("email", "text"),
                      ("country", "text"), ("tier", "text")],
        }  # fmt: skip
        expected = model(config, ops)
        assert table_contents(dsn) == expected
        assert len(expected["orders"]) > 100
        # Again over the same tables: the inserts overwrite, the result is the same.
        again = workload(*args, "--dsn", dsn)
        assert again.returncode == 0, again.stderr
        assert summary_of(again.stdout)["ops"] == str(ops)
        assert table_contents(dsn) == expected


def test_an_unreachable_broker() -> None:
    result = workload("--bootstrap", "127.0.0.1:1", "--connect-timeout-ms", "1000")
    assert result.returncode == 1
    assert result.stderr.startswith(
        "riverbed workload: no broker reachable at 127.0.0.1:1 within 1 s:"
    ), result.stderr
    assert result.stderr.count("\n") == 1 and result.stdout == ""


def test_an_unreachable_or_malformed_database(broker_process: BrokerProcess) -> None:
    bootstrap = ("--bootstrap", broker_process.bootstrap, "--connect-timeout-ms", "2000")
    result = workload(*bootstrap, "--dsn", "postgresql://postgres@127.0.0.1:1/shop")
    assert result.returncode == 1
    assert result.stderr.startswith("riverbed workload: cannot connect to the database:")
    assert result.stderr.count("\n") == 1, result.stderr
    result = workload(*bootstrap, "--dsn", "color=blue")
    assert result.returncode == 2
    assert result.stderr == 'riverbed workload: invalid DSN: invalid connection option "color"\n'


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--events", "-1", "must be at least 0"),
        ("--events", "many", "not an integer"),
        ("--rate", "-5", "must be a number >= 0"),
        ("--event-rate", "0", "must be a number > 0"),
        ("--late-fraction", "0.7", "must be a number from 0 to 0.5"),
        ("--fraud-fraction", "nan", "must be a number from 0 to 1"),
        ("--users", "1", "must be at least 2"),
        ("--disorder-ms", "-1", "must be at least 0"),
        ("--partitions", "0", "must be at least 1"),
    ],
)
def test_bad_values_are_usage_errors(
    flag: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser(prog="riverbed")
    workload_command.add_parser(parser.add_subparsers(dest="command"))
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["workload", "shop", flag, value])
    assert exit_.value.code == 2
    assert f"error: argument {flag}: {message}: {value!r}" in capsys.readouterr().err


def test_the_carts_commands_are_answered_by_the_command_processor(
    group_broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = group_broker.bootstrap
    processor = ChildProcess.spawn(tmp_path / "es.log", "es", "run", "carts", "--bootstrap",
                                   bootstrap)  # fmt: skip
    try:
        processor.wait_for(r"assigned .* partitions \[0, 1, 2\]")  # it made the topics
        shares = ("--cart-conflict-fraction", "0.1", "--cart-invalid-fraction", "0.1",
                  "--cart-resend-fraction", "0.1")  # fmt: skip
        result = workload("--bootstrap", bootstrap, "--events", "2000", "--rate", "0",
                          "--seed", "9", "--users", "500", "--products", "40", "--start-ms",
                          str(START_MS), "--cart-rate", "1", *shares)  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert "created shop.carts.commands" not in result.stderr  # the processor's, 3
        config = ShopConfig(seed=9, users=500, products=40, start_ms=START_MS, cart_rate=1,
                            cart_conflict_fraction=0.1, cart_invalid_fraction=0.1,
                            cart_resend_fraction=0.1)  # fmt: skip
        # The commands whose time the events reached (event time: 20 a second, 100 s).
        progress = max(e.ts for e in itertools.islice(events(config), 2000))
        sent = list(itertools.takewhile(lambda c: c.at_ms <= progress, commands(config)))
        summary = summary_of(result.stdout)
        intents = (("racing", Intent.RIVAL), ("invalid", Intent.INVALID),
                   ("resent", Intent.RESEND))  # fmt: skip
        assert int(summary["commands"]) == len(sent) > 300, summary
        assert int(summary["carts"]) == sum(c.opens_cart for c in sent) > 60
        for field, intent in intents:
            assert int(summary[field]) == sum(c.intent is intent for c in sent) > 10, field
        records = read_to_end(bootstrap, COMMANDS_TOPIC, timeout_s=30)
        assert {r.partition for r in records} == {0, 1, 2}
        for record in records:  # partitioned as Kafka's Java clients do
            assert record.key is not None
            assert record.partition == murmur2_partition(record.key, 3)
        assert sorted((r.key or b"", r.value or b"") for r in records) == sorted(
            (FORMAT.key(c.cart_id), json.dumps(c.value, separators=(",", ":")).encode())
            for c in sent
        )
        ids = {c.command_id for c in sent}
        wait_for_answers(bootstrap, CART_TOPICS, len(ids), processor.log, timeout_s=60)
        deadline = time.monotonic() + 30  # and the retries sent after the last new command
        while count_to_end(bootstrap, CART_TOPICS.results) < len(sent):
            assert time.monotonic() < deadline, processor.log()
            time.sleep(0.2)
    finally:
        assert processor.stop() == 0, processor.log()
    log_events, _ = check_the_log(bootstrap, CART_TOPICS, [c.value for c in sent])
    answers = read_to_end(bootstrap, CART_TOPICS.results, timeout_s=30)
    check_answers(sent, [FORMAT.decode_result(r.value) for r in answers])
    assert len(log_events) == sum(c.intent is Intent.PLAIN for c in sent)
    assert "Traceback" not in processor.log()


def test_cart_commands_can_be_turned_off(broker_process: BrokerProcess) -> None:
    bootstrap = broker_process.bootstrap
    quick = ("--bootstrap", bootstrap, "--events", "300", "--rate", "0", "--users", "200")
    result = workload(*quick, "--cart-rate", "0")
    assert result.returncode == 0, result.stderr
    assert "commands" not in summary_of(result.stdout)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert COMMANDS_TOPIC not in admin.list_topics(timeout=10).topics
    result = workload(*quick, "--cart-rate", "2", "--partitions", "2")
    assert result.returncode == 0, result.stderr
    assert int(summary_of(result.stdout)["commands"]) > 0
    assert (
        "riverbed workload: created shop.carts.commands with 3 partitions, as `riverbed es "
        "run carts` makes its topics\n"
    ) in result.stderr
    topics = admin.list_topics(timeout=10).topics  # --partitions is the clickstream's only
    assert len(topics[COMMANDS_TOPIC].partitions) == 3
