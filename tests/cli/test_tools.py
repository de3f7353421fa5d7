"""The Kafka-style tools run as a user runs them: ``riverbed topics|produce|consume`` processes
against a real ``riverbed broker`` process, cross-checked with kcat."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from tests.support.brokers import BrokerProcess
from tests.support.cli import Run, consume_all, create, ok, run_riverbed
from tests.support.ports import free_port


@pytest.fixture
def riverbed(broker_process: BrokerProcess) -> Run:
    """Runs ``riverbed TOOL [ACTION] ... --bootstrap <the broker>``; asserts nothing."""

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return run_riverbed(*args, "--bootstrap", broker_process.bootstrap, stdin=stdin)

    return run


def test_topics_create_list_describe_alter_delete(riverbed: Run) -> None:
    created = riverbed(
        "topics", "create", "--topic", "orders", "--partitions", "2",
        "--config", "cleanup.policy=compact",
    )  # fmt: skip
    assert ok(created) == "Created topic orders.\n"
    again = riverbed("topics", "create", "--topic", "orders")
    assert again.returncode == 1
    assert "already exists" in again.stderr
    ok(riverbed("topics", "create", "--topic", "orders", "--if-not-exists"))
    ok(riverbed("topics", "create", "--topic", "payments"))
    assert ok(riverbed("topics", "list")).split() == ["orders", "payments"]

    lines = ok(riverbed("topics", "describe", "--topic", "orders")).splitlines()
    header = dict(field.split(": ", 1) for field in lines[0].split("\t"))
    assert header["Topic"] == "orders"
    assert header["PartitionCount"] == "2"
    assert header["ReplicationFactor"] == "1"
    assert header["Configs"] == "cleanup.policy=compact"
    assert len(header["TopicId"]) == 22  # Kafka's base64 UUID
    assert header["TopicId"] != "AAAAAAAAAAAAAAAAAAAAAA"
    partitions = [dict(f.split(": ", 1) for f in line.strip().split("\t")) for line in lines[1:]]
    assert [p["Partition"] for p in partitions] == ["0", "1"]
    assert all(p["Leader"] == p["Replicas"] == p["Isr"] for p in partitions)

    assert ok(riverbed("topics", "alter", "--topic", "orders", "--partitions", "3")).strip()
    described = ok(riverbed("topics", "describe"))  # every topic
    assert "Topic: orders\tTopicId: " in described
    assert "PartitionCount: 3" in described
    assert "\tTopic: orders\tPartition: 2\t" in described
    assert "Topic: payments\t" in described
    shrink = riverbed("topics", "alter", "--topic", "orders", "--partitions", "2")
    assert shrink.returncode == 1

    ok(riverbed("topics", "delete", "--topic", "orders"))
    assert ok(riverbed("topics", "list")).split() == ["payments"]
    gone = riverbed("topics", "delete", "--topic", "orders")
    assert gone.returncode == 1
    assert "does not exist" in gone.stderr
    ok(riverbed("topics", "delete", "--topic", "orders", "--if-exists"))
    missing = riverbed("topics", "describe", "--topic", "orders")
    assert missing.returncode == 1
    assert "does not exist" in missing.stderr


def test_produce_keys_and_headers_then_consume_them_formatted(riverbed: Run) -> None:
    create(riverbed, "events")
    lines = "h1:a,h2:b\tk1:v1\n\tk2:v2:with colon\nh3:c\tk3:\n"
    ok(riverbed(
        "produce", "--topic", "events", "--property", "parse.key=true",
        "--property", "key.separator=:", "--property", "parse.headers=true",
        stdin=lines,
    ))  # fmt: skip
    out = consume_all(riverbed, "events", "--format", "%t/%p/%o key=%k headers=%h value=%s\\n")
    assert out == (
        "events/0/0 key=k1 headers=h1=a,h2=b value=v1\n"
        "events/0/1 key=k2 headers= value=v2:with colon\n"
        "events/0/2 key=k3 headers=h3=c value=\n"
    )


def test_short_key_separator_header_flag_and_kafka_print_properties(riverbed: Run) -> None:
    create(riverbed, "events")
    ok(riverbed(
        "produce", "--topic", "events", "--key-separator", "=", "--header", "source=cli",
        "--compression", "gzip", "--acks", "1", stdin="a=1\nb=2\n",
    ))  # fmt: skip
    out = consume_all(
        riverbed, "events", "--property", "print.key=true", "--property", "print.offset=true",
        "--property", "print.headers=true",
    )  # fmt: skip
    assert out == "Offset:0\tsource:cli\ta\t1\nOffset:1\tsource:cli\tb\t2\n"


def test_from_beginning_exit_at_end_and_max_messages(riverbed: Run) -> None:
    create(riverbed, "numbers", partitions=3)
    # All records in partition 1: partitions 0 and 2 stay empty, yet --exit-at-end must end.
    numbers = "".join(f"{n}\n" for n in range(5))
    ok(riverbed("produce", "--topic", "numbers", "--partition", "1", stdin=numbers))
    assert consume_all(riverbed, "numbers") == numbers
    two = consume_all(riverbed, "numbers", "--max-messages", "2")
    assert two == "0\n1\n"
    # Default start is the end: nothing old is printed, and --exit-at-end still ends.
    assert ok(riverbed("consume", "--topic", "numbers", "--exit-at-end")) == ""


def test_offset_with_partition(riverbed: Run) -> None:
    create(riverbed, "numbers", partitions=2)
    ok(riverbed("produce", "--topic", "numbers", "--partition", "0", stdin="a\nb\n"))
    ok(riverbed("produce", "--topic", "numbers", "--partition", "1", stdin="p0\np1\np2\np3\n"))
    out = ok(riverbed(
        "consume", "--topic", "numbers", "--partition", "1", "--offset", "2", "--exit-at-end",
        "--format", "%p:%o:%s\\n",
    ))  # fmt: skip
    assert out == "1:2:p2\n1:3:p3\n"
    earliest = ok(riverbed(
        "consume", "--topic", "numbers", "--partition", "0", "--offset", "earliest",
        "--exit-at-end",
    ))  # fmt: skip
    assert earliest == "a\nb\n"


def test_from_timestamp(riverbed: Run) -> None:
    create(riverbed, "clicks", partitions=2)
    ok(riverbed("produce", "--topic", "clicks", stdin="old1\nold2\n"))
    time.sleep(0.05)
    cutoff_ms = int(time.time() * 1000)
    time.sleep(0.05)
    ok(riverbed("produce", "--topic", "clicks", stdin="new1\nnew2\nnew3\n"))
    out = ok(riverbed(
        "consume", "--topic", "clicks", "--from-timestamp", str(cutoff_ms), "--exit-at-end",
        "--format", "%T %s\\n",
    ))  # fmt: skip
    records = [line.split() for line in out.splitlines()]
    assert sorted(value for _, value in records) == ["new1", "new2", "new3"]
    assert all(int(ts) >= cutoff_ms for ts, _ in records)


def test_timeout_ms_ends_an_idle_consumer(riverbed: Run) -> None:
    create(riverbed, "quiet")
    started = time.monotonic()
    ok(riverbed("consume", "--topic", "quiet", "--timeout-ms", "1500"))
    assert 1.4 < time.monotonic() - started < 30


def test_kcat_reads_what_produce_wrote(riverbed: Run, broker_process: BrokerProcess) -> None:
    create(riverbed, "crosscheck", partitions=2)
    ok(riverbed(
        "produce", "--topic", "crosscheck", "--key-separator", ":", "--compression", "lz4",
        stdin="k1:v1\nk2:v2\nk3:v3\n",
    ))  # fmt: skip
    kcat = subprocess.run(
        ["kcat", "-C", "-b", broker_process.bootstrap, "-t", "crosscheck", "-e", "-q",
         "-f", "%k=%s\n"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert kcat.returncode == 0, kcat.stderr
    assert sorted(kcat.stdout.splitlines()) == ["k1=v1", "k2=v2", "k3=v3"]


def test_undeliverable_record_is_reported_and_fails_the_run(riverbed: Run) -> None:
    create(riverbed, "small")
    result = riverbed(
        "produce", "--topic", "small", "--producer-property", "message.max.bytes=1000",
        stdin="fits\n" + "x" * 5000 + "\n",
    )  # fmt: skip
    assert result.returncode == 1
    assert "line 2 not delivered" in result.stderr
    assert "1 of 2 records not delivered" in result.stderr
    assert "Traceback" not in result.stderr
    assert consume_all(riverbed, "small") == "fits\n"


def _default_sigint() -> None:
    """In the child: SIGINT as a terminal's Ctrl-C finds it. A shell without job control
    starts background jobs with SIGINT ignored, and Python keeps an ignored SIGINT ignored
    (no KeyboardInterrupt), so a test run started that way would see consume ignore it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_consume_cleanly(riverbed: Run, broker_process: BrokerProcess) -> None:
    create(riverbed, "live")
    ok(riverbed("produce", "--topic", "live", stdin="hello\n"))
    consumer = subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-m", "riverbed.cli.main", "consume",
         "--topic", "live", "--from-beginning", "--bootstrap", broker_process.bootstrap],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_default_sigint,
    )  # fmt: skip
    try:
        assert consumer.stdout is not None
        assert consumer.stdout.readline() == "hello\n"
        consumer.send_signal(signal.SIGINT)
        try:
            _, stderr = consumer.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            consumer.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            _, stuck = consumer.communicate(timeout=30)
            pytest.fail(f"consume did not stop within 30 s of SIGINT; where it was:\n{stuck}")
    finally:
        if consumer.poll() is None:
            consumer.kill()
        consumer.communicate()  # reaps it and closes the pipes
    assert consumer.returncode in (0, 130)
    assert "Traceback" not in stderr


def test_unknown_topic(riverbed: Run) -> None:
    result = riverbed("consume", "--topic", "nope", "--exit-at-end")
    assert result.returncode == 1
    assert result.stderr.strip() == "riverbed consume: topic 'nope' does not exist"


def test_partition_that_does_not_exist(riverbed: Run) -> None:
    create(riverbed, "one")
    result = riverbed("consume", "--topic", "one", "--partition", "5", "--offset", "0")
    assert result.returncode == 1
    assert "has no partition 5" in result.stderr


@pytest.mark.parametrize(
    "tool",
    [("topics", "list"), ("produce", "--topic", "t"), ("consume", "--topic", "t"),
     ("transactions", "list"), ("transactions", "describe", "x")],
    ids=["topics", "produce", "consume", "transactions-list", "transactions-describe"],
)  # fmt: skip
def test_unreachable_bootstrap_is_one_line_after_a_bounded_wait(tool: tuple[str, ...]) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    result = run_riverbed(
        *tool, "--bootstrap", bootstrap, "--connect-timeout-ms", "1500", stdin="x\n",
        timeout_s=30,
    )  # fmt: skip
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert f"no broker reachable at {bootstrap} within 1.5 s" in result.stderr
    assert time.monotonic() - started < 15


def test_default_bootstrap_wait_is_ten_seconds() -> None:
    started = time.monotonic()
    result = run_riverbed("topics", "list", "--bootstrap", f"127.0.0.1:{free_port()}")
    elapsed = time.monotonic() - started
    assert result.returncode == 1
    assert "within 10 s" in result.stderr
    assert 9 < elapsed < 25


@pytest.mark.parametrize(
    "args",
    [
        ("consume", "--topic", "t", "--no-such-flag"),
        ("consume", "--topic", "t", "--from-beginning", "--offset", "3"),
        ("consume", "--topic", "t", "--offset", "3"),
        ("consume", "--topic", "t", "--format", "%q"),
        ("produce", "--topic", "t", "--acks", "2"),
        ("produce", "--topic", "t", "--property", "no.such=1"),
        ("topics", "create"),
        ("topics", "create", "--topic", "t", "--partitions", "0"),
        ("topics", "create", "--topic", "t", "--config", "no-equals-sign"),
        ("topics", "frobnicate"),
    ],
)
def test_bad_flags_are_usage_errors(args: tuple[str, ...]) -> None:
    result = run_riverbed(*args, "--bootstrap", f"127.0.0.1:{free_port()}", timeout_s=30)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip()
