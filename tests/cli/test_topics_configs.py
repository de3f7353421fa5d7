"""``riverbed topics alter`` with configs, ``describe --all-configs`` and ``delete-records``,
run as a user runs them against a real ``riverbed broker`` process."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from tests.support.brokers import BrokerProcess
from tests.support.cli import Run, consume_all, create, ok, run_riverbed


@pytest.fixture
def riverbed(broker_process: BrokerProcess) -> Run:
    """``riverbed TOOL ACTION ... --bootstrap <the broker>`` (as in test_tools)."""
    return functools.partial(_run_against, broker_process.bootstrap)


def _run_against(bootstrap: str, *args: str, stdin: str | None = None) -> Any:
    return run_riverbed(*args, "--bootstrap", bootstrap, stdin=stdin)


def header_configs(riverbed: Run, topic: str) -> str:
    first = ok(riverbed("topics", "describe", "--topic", topic)).splitlines()[0]
    return dict(field.split(": ", 1) for field in first.split("\t"))["Configs"]


def all_configs(riverbed: Run, topic: str) -> dict[str, str]:
    """``name: "value (SOURCE)"`` from ``describe --all-configs``."""
    lines = ok(riverbed("topics", "describe", "--topic", topic, "--all-configs")).splitlines()
    configs = [line.strip() for line in lines if "=" in line and "\tTopic:" not in line]
    return dict(line.split("=", 1) for line in configs if not line.startswith("Topic:"))


def test_alter_adds_and_deletes_configs_and_grows_partitions(riverbed: Run) -> None:
    create(riverbed, "tuned")
    done = riverbed(
        "topics", "alter", "--topic", "tuned", "--partitions", "2",
        "--add-config", "retention.ms=3600000", "--add-config", "cleanup.policy=compact,delete",
        "--add-config", "segment.ms=60000",
    )  # fmt: skip
    assert ok(done) == "Topic tuned now has 2 partitions.\nUpdated the configs of topic tuned.\n"
    assert header_configs(riverbed, "tuned") == (
        "cleanup.policy=compact,delete,retention.ms=3600000,segment.ms=60000"
    )
    configs = all_configs(riverbed, "tuned")
    assert configs["retention.ms"] == "3600000 (DYNAMIC_TOPIC_CONFIG)"
    assert configs["segment.bytes"] == "1073741824 (DEFAULT_CONFIG)"
    assert configs["max.message.bytes"] == "1048588 (DEFAULT_CONFIG)"
    assert len(configs) == 21

    deleted = riverbed(
        "topics", "alter", "--topic", "tuned", "--delete-config", "cleanup.policy,segment.ms"
    )
    assert ok(deleted) == "Updated the configs of topic tuned.\n"
    assert header_configs(riverbed, "tuned") == "retention.ms=3600000"
    assert all_configs(riverbed, "tuned")["cleanup.policy"] == "delete (DEFAULT_CONFIG)"
    described = ok(riverbed("topics", "describe", "--topic", "tuned"))
    assert "PartitionCount: 2" in described
    assert "(DEFAULT_CONFIG)" not in described, "without --all-configs: the topic's own only"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--add-config", "retention.ms=soon"), "retention.ms: 'soon' is not an integer"),
        (("--add-config", "retention.mss=1"), "unknown topic config 'retention.mss'"),
        (("--delete-config", "retention.mss"), "unknown topic config 'retention.mss'"),
        (("--partitions", "3", "--add-config", "segment.bytes=1"), "segment.bytes: 1 is outside"),
        (("--partitions", "1", "--add-config", "segment.bytes=2000"), "partitions of topic"),
    ],
)
def test_bad_alters_are_one_line_and_change_nothing(
    riverbed: Run, args: tuple[str, ...], message: str
) -> None:
    create(riverbed, "kept", partitions=2)
    ok(riverbed("topics", "alter", "--topic", "kept", "--add-config", "retention.ms=1000"))
    done = riverbed("topics", "alter", "--topic", "kept", *args)
    assert done.returncode == 1, done.stderr
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr
    assert header_configs(riverbed, "kept") == "retention.ms=1000"
    assert "PartitionCount: 2" in ok(riverbed("topics", "describe", "--topic", "kept"))


def test_alter_usage_errors(riverbed: Run) -> None:
    create(riverbed, "u")
    cases = [
        (
            ("topics", "alter", "--topic", "u"),
            "needs --partitions, --add-config or --delete-config",
        ),
        (("topics", "alter", "--topic", "u", "--add-config", "novalue"), "KEY=VALUE"),
        (
            ("topics", "alter", "--topic", "u", "--add-config", "a=1", "--delete-config", "a"),
            "'a' is both added and deleted",
        ),
        (("topics", "delete-records", "--topic", "u", "--offset", "-2"), "an offset or -1"),
        (("topics", "delete-records", "--topic", "u"), "--offset"),
    ]
    for args, message in cases:
        done = riverbed(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert message in done.stderr
    missing = riverbed("topics", "alter", "--topic", "absent", "--add-config", "retention.ms=1")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "riverbed topics: topic 'absent' does not exist"


def test_delete_records_moves_the_earliest_offset(riverbed: Run) -> None:
    create(riverbed, "trim", partitions=2)
    ok(riverbed("produce", "--topic", "trim", "--partition", "0", stdin="a\nb\nc\nd\n"))
    ok(riverbed("produce", "--topic", "trim", "--partition", "1", stdin="e\nf\n"))
    done = riverbed(
        "topics", "delete-records", "--topic", "trim", "--partition", "0", "--offset", "2"
    )
    assert ok(done) == "Records delete operation completed:\npartition: trim-0\tlow_watermark: 2\n"
    assert consume_all(riverbed, "trim", "--partition", "0") == "c\nd\n"

    everything = riverbed("topics", "delete-records", "--topic", "trim", "--offset", "-1")
    assert ok(everything).splitlines()[1:] == [
        "partition: trim-0\tlow_watermark: 4",
        "partition: trim-1\tlow_watermark: 2",
    ]
    assert consume_all(riverbed, "trim") == ""

    past = riverbed(
        "topics", "delete-records", "--topic", "trim", "--partition", "1", "--offset", "9"
    )
    assert past.returncode == 1
    assert "cannot delete the records of trim-1: " in past.stderr
    assert "Offset out of range" in past.stderr
    nowhere = riverbed(
        "topics", "delete-records", "--topic", "trim", "--partition", "5", "--offset", "0"
    )
    assert nowhere.returncode == 1
    assert "topic 'trim' has no partition 5 (it has 2)" in nowhere.stderr
    absent = riverbed("topics", "delete-records", "--topic", "absent", "--offset", "0")
    assert absent.returncode == 1
    assert "topic 'absent' does not exist" in absent.stderr
    for result in (past, nowhere, absent):
        assert "Traceback" not in result.stderr


def test_without_a_broker_each_new_action_is_one_line() -> None:
    for args in (
        ("topics", "alter", "--topic", "t", "--add-config", "retention.ms=1"),
        ("topics", "delete-records", "--topic", "t", "--offset", "0"),
        ("topics", "describe", "--all-configs"),
    ):
        done = run_riverbed(*args, "--bootstrap", "127.0.0.1:9", "--connect-timeout-ms", "500")
        assert done.returncode == 1, done.stderr
        assert "no broker reachable at 127.0.0.1:9" in done.stderr
        assert "Traceback" not in done.stderr
