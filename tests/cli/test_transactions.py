"""``riverbed transactions`` as a user runs it, against a real ``riverbed broker`` process,
with transactions made by real confluent-kafka transactional producers."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from tests.support.brokers import BrokerProcess, create_topic
from tests.support.cli import Run, failed, ok, run_riverbed, table
from tests.support.transactions import txn_producer

TIMEOUT_MS = 45_000  # the open transaction's transaction.timeout.ms (Kafka's default: 60000)


@pytest.fixture
def transactions(broker_process: BrokerProcess) -> Run:
    """Runs ``riverbed transactions ACTION ... --bootstrap <the broker>``; asserts nothing."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return run_riverbed("transactions", *args, "--bootstrap", broker_process.bootstrap)

    return run


def transactional_producer(bootstrap: str, transactional_id: str) -> Producer:
    return txn_producer(bootstrap, transactional_id, **{"transaction.timeout.ms": TIMEOUT_MS})


@pytest.fixture
def two_producers(broker_process: BrokerProcess) -> Iterator[tuple[Producer, Producer]]:
    """``idle`` (initialised, no transaction: Empty) and ``busy``, whose transaction is open
    with records in partitions 0 and 2 of topic ``t``."""
    bootstrap = broker_process.bootstrap
    create_topic(bootstrap, "t", partitions=3)
    idle = transactional_producer(bootstrap, "idle")
    busy = transactional_producer(bootstrap, "busy")
    busy.begin_transaction()
    busy.produce("t", b"a", partition=0)
    busy.produce("t", b"b", partition=2)
    assert busy.flush(30) == 0
    yield idle, busy
    busy.abort_transaction(30)


def listed(transactions: Run, *args: str) -> dict[str, dict[str, str]]:
    """``list`` rows by transactional id (checking they come sorted)."""
    rows = table(ok(transactions("list", *args)))
    ids = [row["TransactionalId"] for row in rows]
    assert ids == sorted(ids)
    return {row["TransactionalId"]: row for row in rows}


def described(transactions: Run, *ids: str) -> dict[str, dict[str, str]]:
    rows = table(ok(transactions("describe", *ids)))
    return {row["TransactionalId"]: row for row in rows}


@pytest.mark.usefixtures("two_producers")
def test_list_shows_each_transactional_id_with_its_producer_and_state(
    transactions: Run,
) -> None:
    rows = listed(transactions)
    assert list(rows) == ["busy", "idle"]
    assert rows["idle"]["TransactionState"] == "Empty"
    assert rows["busy"]["TransactionState"] == "Ongoing"
    assert {row["Coordinator"] for row in rows.values()} == {"0"}  # node.id of the broker
    by_describe = described(transactions, "busy", "idle")
    for transactional_id, row in rows.items():
        assert row["ProducerId"] == by_describe[transactional_id]["ProducerId"]
    assert rows["idle"]["ProducerId"] != rows["busy"]["ProducerId"]


@pytest.mark.usefixtures("two_producers")
def test_list_filters_by_state_producer_id_duration_and_pattern(transactions: Run) -> None:
    everything = listed(transactions)
    assert list(listed(transactions, "--state", "Ongoing")) == ["busy"]
    # Kafka's state names, case-insensitive here; a comma-separated list or repeated flags.
    assert list(listed(transactions, "--state", "empty")) == ["idle"]
    assert list(listed(transactions, "--state", "Empty,Ongoing")) == ["busy", "idle"]
    assert list(listed(transactions, "--state", "Empty", "--state", "CompleteCommit")) == ["idle"]
    idle_pid = everything["idle"]["ProducerId"]
    assert list(listed(transactions, "--producer-id", idle_pid)) == ["idle"]
    assert list(listed(transactions, "--producer-id", "999999")) == []
    # Only open transactions have a duration; none has run for an hour.
    assert list(listed(transactions, "--duration-ms", "0")) == ["busy"]
    assert list(listed(transactions, "--duration-ms", "3600000")) == []
    assert list(listed(transactions, "--pattern", "i.*")) == ["idle"]
    assert list(listed(transactions, "--transactional-id-pattern", "b.s.")) == ["busy"]


@pytest.mark.usefixtures("two_producers")
def test_an_unknown_state_is_a_warning_on_stderr(transactions: Run) -> None:
    result = transactions("list", "--state", "Ongoing,Sleeping")
    assert [row["TransactionalId"] for row in table(ok(result))] == ["busy"]
    warning = result.stderr.strip().splitlines()
    assert len(warning) == 1
    assert "the broker does not know the state(s) Sleeping" in warning[0]
    # Only unknown states: nothing matches (Kafka's rule), and the run still succeeds.
    only_unknown = transactions("list", "--state", "Sleeping")
    assert ok(only_unknown) == ""
    assert "Sleeping" in only_unknown.stderr


def test_describe_shows_the_open_transaction_then_its_commit(
    transactions: Run, two_producers: tuple[Producer, Producer]
) -> None:
    _, busy = two_producers
    before_ms = time.time() * 1000
    rows = described(transactions, "busy", "idle")
    assert list(rows) == ["busy", "idle"]
    open_txn = rows["busy"]
    assert open_txn["TransactionState"] == "Ongoing"
    assert open_txn["ProducerEpoch"] == "0"
    assert open_txn["TransactionTimeoutMs"] == str(TIMEOUT_MS)
    assert open_txn["TopicPartitions"] == "t-0,t-2"
    started_ms = int(open_txn["CurrentTransactionStartTimeMs"])
    assert before_ms - 60_000 < started_ms <= before_ms
    assert 0 <= int(open_txn["TransactionDurationMs"]) < 60_000
    # No transaction yet: the broker sends a start time of -1, which kio cannot read as is.
    idle = rows["idle"]
    assert idle["TransactionState"] == "Empty"
    assert (idle["CurrentTransactionStartTimeMs"], idle["TransactionDurationMs"]) == ("-", "-")
    assert idle["TopicPartitions"] == "-"

    busy.commit_transaction(30)
    committed = described(transactions, "--transactional-id", "busy")["busy"]
    assert committed["TransactionState"] == "CompleteCommit"
    assert committed["TopicPartitions"] == "-"
    assert committed["ProducerId"] == open_txn["ProducerId"]
    busy.begin_transaction()  # for the fixture's abort


@pytest.mark.usefixtures("two_producers")
def test_describe_of_an_unknown_id_fails_the_run_but_prints_the_others(
    transactions: Run,
) -> None:
    result = transactions("describe", "nobody", "idle")
    assert failed(result).strip() == (
        "riverbed transactions: transactional id 'nobody' does not exist"
    )
    assert [row["TransactionalId"] for row in table(result.stdout)] == ["idle"]


def test_describe_needs_an_id(transactions: Run) -> None:
    result = transactions("describe")
    assert "name a transactional id" in failed(result, code=2)


def test_consume_isolation_level_hides_aborted_and_open_transactions(
    broker_process: BrokerProcess,
) -> None:
    bootstrap = broker_process.bootstrap
    create_topic(bootstrap, "iso", partitions=1)
    producer = transactional_producer(bootstrap, "iso")
    for value, commit in ((b"committed", True), (b"aborted", False)):
        producer.begin_transaction()
        producer.produce("iso", value, partition=0)
        assert producer.flush(30) == 0
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce("iso", b"open", partition=0)
    assert producer.flush(30) == 0

    def consume(*args: str) -> str:
        return ok(
            run_riverbed(
                "consume", "--topic", "iso", "--from-beginning", "--exit-at-end",
                "--bootstrap", bootstrap, *args,
            )
        )  # fmt: skip

    assert consume() == "committed\naborted\nopen\n"  # Kafka's console default
    assert consume("--isolation-level", "read_committed") == "committed\n"
    producer.commit_transaction(30)
    assert consume("--isolation-level", "read_committed") == "committed\nopen\n"
