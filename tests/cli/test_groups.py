"""``riverbed groups`` as a user runs it, against a real ``riverbed broker`` process, with
groups made by real confluent-kafka consumers that subscribe, commit and stay or leave."""

from __future__ import annotations

import datetime
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from confluent_kafka import Consumer, Producer

from tests.support.brokers import BrokerProcess, create_topic
from tests.support.cli import Run, failed, ok, run_riverbed, table
from tests.support.ports import free_port


@pytest.fixture
def groups(group_broker: BrokerProcess) -> Run:
    """Runs ``riverbed groups ACTION ... --bootstrap <the broker>``; asserts nothing."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return run_riverbed("groups", *args, "--bootstrap", group_broker.bootstrap)

    return run


def offsets(groups: Run, group: str) -> dict[tuple[str, int], dict[str, str]]:
    """``describe GROUP`` rows by (topic, partition)."""
    rows = table(ok(groups("describe", group)))
    assert all(row["GROUP"] == group for row in rows)
    return {(row["TOPIC"], int(row["PARTITION"])): row for row in rows}


def produce(bootstrap: str, topic: str, partition: int, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value.encode(), partition=partition)
    assert producer.flush(30) == 0


def new_topic(bootstrap: str, topic: str, *partitions: list[str]) -> None:
    """Create ``topic`` with one partition per list, and produce each list into its partition."""
    create_topic(bootstrap, topic, partitions=len(partitions))
    for partition, values in enumerate(partitions):
        produce(bootstrap, topic, partition, values)


def consumer_config(bootstrap: str, group: str) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": f"{group}-client",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 10_000,
    }


def consume(
    bootstrap: str, group: str, topics: list[str], count: int, *, commit: bool
) -> list[str]:
    """Join ``group``, read ``count`` records, commit them (if asked), then leave the group."""
    consumer = Consumer(consumer_config(bootstrap, group))
    consumer.subscribe(topics)
    values: list[str] = []
    deadline = time.monotonic() + 60
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value().decode())
        assert len(values) == count, values
        if commit:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values


@contextmanager
def active_member(bootstrap: str, group: str, topic: str) -> Iterator[Consumer]:
    """A member of ``group`` that has its assignment, for the duration of the block."""
    consumer = Consumer(consumer_config(bootstrap, group))
    consumer.subscribe([topic])
    try:
        wait_for_assignment(consumer)
        yield consumer
    finally:
        consumer.close()


def wait_for_assignment(
    consumer: Consumer, *, partitions: int | None = None, timeout_s: float = 60
) -> None:
    """Poll ``consumer`` until the group gives it partitions (``partitions`` of them, if given)."""
    deadline = time.monotonic() + timeout_s
    while True:
        count = len(consumer.assignment())
        if count and (partitions is None or count == partitions):
            return
        assert time.monotonic() < deadline, "the consumer was never assigned partitions"
        consumer.poll(0.2)


def test_list_and_describe_show_committed_offsets_and_growing_lag(
    groups: Run, group_broker: BrokerProcess
) -> None:
    bootstrap = group_broker.bootstrap
    new_topic(bootstrap, "orders", ["a", "b", "c"], ["d", "e"])
    assert sorted(consume(bootstrap, "billing", ["orders"], 5, commit=True)) == list("abcde")

    listed = table(ok(groups("list")))
    assert {"GROUP": "billing", "TYPE": "Classic", "STATE": "Empty"} in listed

    described = groups("describe", "billing")
    assert "consumer group 'billing' has no active members" in described.stderr
    rows = offsets(groups, "billing")
    assert set(rows) == {("orders", 0), ("orders", 1)}
    assert [rows["orders", 0][c] for c in ("CURRENT-OFFSET", "LOG-END-OFFSET", "LAG")] == [
        "3", "3", "0"
    ]  # fmt: skip
    assert [rows["orders", 1][c] for c in ("CURRENT-OFFSET", "LOG-END-OFFSET", "LAG")] == [
        "2", "2", "0"
    ]  # fmt: skip
    assert rows["orders", 0]["CONSUMER-ID"] == "-"

    produce(bootstrap, "orders", 0, ["f", "g", "h", "i"])
    rows = offsets(groups, "billing")
    assert rows["orders", 0]["LOG-END-OFFSET"] == "7"
    assert rows["orders", 0]["LAG"] == "4"
    assert rows["orders", 1]["LAG"] == "0"


def test_describe_shows_members_while_a_consumer_is_active(
    groups: Run, group_broker: BrokerProcess
) -> None:
    bootstrap = group_broker.bootstrap
    new_topic(bootstrap, "clicks", ["x"], [])
    with active_member(bootstrap, "live", "clicks"):
        described = groups("describe", "live")
        assert "no active members" not in described.stderr
        rows = table(ok(described))
        assert [(r["TOPIC"], r["PARTITION"]) for r in rows] == [("clicks", "0"), ("clicks", "1")]
        assert all(r["CLIENT-ID"] == "live-client" for r in rows)
        assert all(r["CONSUMER-ID"] not in ("-", "") for r in rows)
        assert all(r["HOST"] != "-" for r in rows)
        assert rows[0]["CURRENT-OFFSET"] == "-"  # nothing committed yet
        assert rows[0]["LOG-END-OFFSET"] == "1"

        members = table(ok(groups("describe", "live", "--members", "--verbose")))
        assert len(members) == 1
        assert members[0]["#PARTITIONS"] == "2"
        assert members[0]["ASSIGNMENT"] == "clicks(0,1)"

        state_lines = ok(groups("describe", "--group", "live", "--state")).splitlines()
        assert state_lines[0].split() == [
            "GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"
        ]  # fmt: skip
        assert state_lines[1].split()[-2:] == ["Stable", "1"]

        assert [r["GROUP"] for r in table(ok(groups("list", "--state", "Stable")))] == ["live"]
        assert table(ok(groups("list", "--state", "empty,dead"))) == []


def test_reset_offsets_dry_run_changes_nothing_execute_does(
    groups: Run, group_broker: BrokerProcess
) -> None:
    bootstrap = group_broker.bootstrap
    new_topic(bootstrap, "events", ["e0", "e1", "e2", "e3", "e4"])
    consume(bootstrap, "replayer", ["events"], 5, commit=True)

    dry = groups("reset-offsets", "replayer", "--topic", "events", "--to-earliest")
    assert table(ok(dry)) == [
        {"GROUP": "replayer", "TOPIC": "events", "PARTITION": "0", "NEW-OFFSET": "0"}
    ]
    assert "dry run" in dry.stderr
    assert offsets(groups, "replayer")["events", 0]["CURRENT-OFFSET"] == "5"

    ok(groups("reset-offsets", "replayer", "--topic", "events", "--to-offset", "2", "--execute"))
    assert offsets(groups, "replayer")["events", 0]["CURRENT-OFFSET"] == "2"
    assert offsets(groups, "replayer")["events", 0]["LAG"] == "3"
    # A consumer of the group resumes from the reset offset.
    assert consume(bootstrap, "replayer", ["events"], 3, commit=True) == ["e2", "e3", "e4"]


def test_reset_offsets_is_refused_while_the_group_has_members(
    groups: Run, group_broker: BrokerProcess
) -> None:
    bootstrap = group_broker.bootstrap
    new_topic(bootstrap, "busy", ["a", "b"])
    consume(bootstrap, "workers", ["busy"], 2, commit=True)
    with active_member(bootstrap, "workers", "busy"):
        refused = groups(
            "reset-offsets", "workers", "--topic", "busy", "--to-earliest", "--execute"
        )
        assert "active members" in failed(refused)
        assert "state Stable" in refused.stderr
    assert offsets(groups, "workers")["busy", 0]["CURRENT-OFFSET"] == "2"


def test_reset_to_datetime(groups: Run, group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    new_topic(bootstrap, "history", ["old0", "old1", "old2"])
    time.sleep(0.05)
    cutoff = datetime.datetime.now(datetime.UTC).replace(microsecond=0) + datetime.timedelta(
        seconds=1
    )
    time.sleep(max(0.0, cutoff.timestamp() - time.time()) + 0.05)
    produce(bootstrap, "history", 0, ["new3", "new4"])
    consume(bootstrap, "audit", ["history"], 5, commit=True)

    def new_offset(when: str) -> str:
        rows = table(ok(groups("reset-offsets", "audit", "--topic", "history",
                               "--to-datetime", when)))  # fmt: skip
        return rows[0]["NEW-OFFSET"]

    assert new_offset(cutoff.strftime("%Y-%m-%dT%H:%M:%SZ")) == "3"
    assert new_offset(cutoff.strftime("%Y-%m-%dT%H:%M:%S")) == "3"  # naive: UTC
    in_paris_winter = cutoff.astimezone(datetime.timezone(datetime.timedelta(hours=1)))
    assert new_offset(in_paris_winter.isoformat()) == "3"
    assert new_offset("2000-01-01T00:00:00Z") == "0"
    assert new_offset("2100-01-01T00:00:00Z") == "5"  # no record that late: the end

    ok(groups("reset-offsets", "audit", "--topic", "history", "--execute",
              "--to-datetime", cutoff.isoformat()))  # fmt: skip
    assert consume(bootstrap, "audit", ["history"], 2, commit=False) == ["new3", "new4"]


def test_shift_by_and_to_offset_clamp_and_partition_lists(
    groups: Run, group_broker: BrokerProcess
) -> None:
    bootstrap = group_broker.bootstrap
    new_topic(bootstrap, "ledger", ["a", "b", "c"], ["d", "e", "f", "g"])
    consume(bootstrap, "books", ["ledger"], 7, commit=True)

    def plan(*args: str) -> dict[str, str]:
        rows = table(ok(groups("reset-offsets", "books", *args)))
        return {row["PARTITION"]: row["NEW-OFFSET"] for row in rows}

    assert plan("--topic", "ledger", "--shift-by", "-2") == {"0": "1", "1": "2"}
    assert plan("--topic", "ledger", "--shift-by", "-100") == {"0": "0", "1": "0"}
    assert plan("--topic", "ledger", "--shift-by", "5") == {"0": "3", "1": "4"}
    assert plan("--topic", "ledger", "--to-offset", "99") == {"0": "3", "1": "4"}
    assert plan("--topic", "ledger:1", "--to-offset", "1") == {"1": "1"}
    assert plan("--all-topics", "--to-latest") == {"0": "3", "1": "4"}

    ok(groups("reset-offsets", "books", "--topic", "ledger:1", "--shift-by", "-3", "--execute"))
    rows = offsets(groups, "books")
    assert rows["ledger", 0]["CURRENT-OFFSET"] == "3"
    assert rows["ledger", 1]["CURRENT-OFFSET"] == "1"

    no_partition = groups("reset-offsets", "books", "--topic", "ledger:7", "--to-earliest")
    assert "has no partition 7" in failed(no_partition)
    no_topic = groups("reset-offsets", "books", "--topic", "nope", "--to-earliest")
    assert "topic 'nope' does not exist" in failed(no_topic)


def test_reset_offsets_of_a_new_group_seeds_it(groups: Run, group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    new_topic(bootstrap, "seeded", ["s0", "s1", "s2"])
    shifted = groups("reset-offsets", "fresh", "--topic", "seeded", "--shift-by", "1")
    assert "no committed offset" in failed(shifted)
    ok(groups("reset-offsets", "fresh", "--topic", "seeded", "--to-offset", "1", "--execute"))
    assert consume(bootstrap, "fresh", ["seeded"], 2, commit=False) == ["s1", "s2"]


def test_delete(groups: Run, group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    new_topic(bootstrap, "jobs", ["j"])
    consume(bootstrap, "done", ["jobs"], 1, commit=True)
    consume(bootstrap, "running", ["jobs"], 1, commit=True)

    with active_member(bootstrap, "running", "jobs"):
        busy = groups("delete", "running")
        assert "NON_EMPTY_GROUP" in failed(busy)
        assert "'running'" in busy.stderr

    deleted = ok(groups("delete", "done"))
    assert deleted.strip() == "Deletion of requested consumer groups ('done') was successful."
    assert "done" not in [row["GROUP"] for row in table(ok(groups("list")))]
    assert "consumer group 'done' does not exist" in failed(groups("describe", "done"))
    assert "consumer group 'done' does not exist" in failed(groups("delete", "done"))


def test_unknown_group(groups: Run) -> None:
    assert failed(groups("describe", "nobody")).strip() == (
        "riverbed groups: consumer group 'nobody' does not exist"
    )
    assert "does not exist" in failed(groups("describe", "nobody", "--members"))


@pytest.mark.parametrize(
    "action",
    [("list",), ("describe", "g"), ("reset-offsets", "g", "--topic", "t", "--to-earliest"),
     ("delete", "g")],
    ids=["list", "describe", "reset-offsets", "delete"],
)  # fmt: skip
def test_unreachable_broker_is_one_line(action: tuple[str, ...]) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    result = run_riverbed(
        "groups", *action, "--bootstrap", bootstrap, "--connect-timeout-ms", "1500"
    )
    assert f"no broker reachable at {bootstrap} within 1.5 s" in failed(result)
    assert time.monotonic() - started < 15


@pytest.mark.parametrize(
    "args",
    [
        ("list", "--state", "Sleeping"),
        ("describe",),
        ("describe", "g", "--members", "--state"),
        ("reset-offsets", "g", "--topic", "t"),
        ("reset-offsets", "g", "--to-earliest"),
        ("reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"),
        ("reset-offsets", "g", "--topic", "t", "--to-offset", "-1"),
        ("reset-offsets", "g", "--topic", "t", "--to-datetime", "last tuesday"),
        ("reset-offsets", "g", "--topic", "t:a", "--to-earliest"),
        ("reset-offsets", "g", "--topic", "t", "--to-earliest", "--dry-run", "--execute"),
        ("reset-offsets", "g", "--group", "h", "--topic", "t", "--to-earliest"),
        ("reset-offsets", "--topic", "t", "--to-earliest"),
        ("delete",),
        ("delete", "g", "--no-such-flag"),
        ("frobnicate",),
    ],
)
def test_bad_flags_are_usage_errors(args: tuple[str, ...]) -> None:
    result = run_riverbed("groups", *args, "--bootstrap", f"127.0.0.1:{free_port()}")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip()


def next_generation_consumer(bootstrap: str, group: str, topic: str) -> Consumer:
    """A KIP-848 member (group.protocol=consumer) of ``group``, subscribed to ``topic``."""
    config = consumer_config(bootstrap, group)
    del config["session.timeout.ms"]  # a broker-side setting under group.protocol=consumer
    consumer = Consumer({**config, "group.protocol": "consumer"})
    consumer.subscribe([topic])
    return consumer


def test_describe_a_next_generation_group(groups: Run, group_broker: BrokerProcess) -> None:
    """A KIP-848 member (group.protocol=consumer) has no HOST; the table still has 9 columns."""
    bootstrap = group_broker.bootstrap
    new_topic(bootstrap, "modern", ["m0", "m1"], ["m2"])
    consumer = next_generation_consumer(bootstrap, "kip848", "modern")
    try:
        received = 0
        deadline = time.monotonic() + 60
        while received < 3 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            received += message is not None and message.error() is None
        assert received == 3
        consumer.commit(asynchronous=False)
        rows = offsets(groups, "kip848")
        assert [rows["modern", p]["CURRENT-OFFSET"] for p in (0, 1)] == ["2", "1"]
        assert all(row["CLIENT-ID"] == "kip848-client" for row in rows.values())
        assert all(row["CONSUMER-ID"] != "-" for row in rows.values())
    finally:
        consumer.close()


def test_list_shows_a_next_generation_group(groups: Run, group_broker: BrokerProcess) -> None:
    """``groups list`` shows a group.protocol=consumer group beside a classic one, by type."""
    bootstrap = group_broker.bootstrap
    new_topic(bootstrap, "both", ["b0"], ["b1"])
    consumer = next_generation_consumer(bootstrap, "next-gen", "both")
    try:
        wait_for_assignment(consumer, partitions=2, timeout_s=30)
        ok(groups("reset-offsets", "classic-one", "--topic", "both", "--to-earliest", "--execute"))
        rows = {row["GROUP"]: row for row in table(ok(groups("list")))}
        assert rows["next-gen"] == {"GROUP": "next-gen", "TYPE": "Consumer", "STATE": "Stable"}
        assert rows["classic-one"]["TYPE"] in {"Classic", "Simple"}
    finally:
        consumer.close()
    rows = {row["GROUP"]: row for row in table(ok(groups("list")))}
    assert rows["next-gen"]["STATE"] == "Empty"
