"""riverbed.testing.topic_reader against a broker in this process: reading to the end under each
isolation level, a topic that does not exist, an end that never comes."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from riverbed.broker import Broker
from riverbed.testing.topic_reader import (
    READ_UNCOMMITTED,
    TopicReadError,
    count_to_end,
    last_values,
    read_to_end,
    repeated_keys,
)
from tests.support.brokers import create_topic
from tests.support.transactions import txn_producer


def test_reads_every_partition_to_its_end_and_read_committed_stops_at_an_open_transaction(
    broker: Broker,
) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, "t", partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce("t", value=b"%d" % i, key=b"k", partition=i % 2, headers=[("h", b"v")])
    assert producer.flush(30) == 0
    open_txn = txn_producer(bootstrap, "open")
    open_txn.begin_transaction()
    open_txn.produce("t", value=b"open", partition=0)
    assert open_txn.flush(30) == 0

    committed = read_to_end(bootstrap, "t")
    assert sorted(r.value or b"" for r in committed) == [b"%d" % i for i in range(10)]
    assert {(r.partition, r.offset) for r in committed} == {(i % 2, i // 2) for i in range(10)}
    assert {(r.topic, r.key, tuple(r.headers or ())) for r in committed} == {
        ("t", b"k", (("h", b"v"),))
    }
    assert count_to_end(bootstrap, "t", partitions=2) == 10
    everything = read_to_end(bootstrap, "t", partitions=2, isolation=READ_UNCOMMITTED)
    assert b"open" in [r.value for r in everything]
    assert count_to_end(bootstrap, "t", isolation=READ_UNCOMMITTED) == 11
    open_txn.abort_transaction(30)


def test_a_topic_that_does_not_exist_has_no_records(broker: Broker) -> None:
    assert read_to_end(broker.bootstrap_servers, "missing") == []


def test_a_partition_whose_end_never_comes_raises(broker: Broker) -> None:
    create_topic(broker.bootstrap_servers, "one", partitions=1)
    with pytest.raises(TopicReadError, match="one"):
        read_to_end(broker.bootstrap_servers, "one", partitions=2, timeout_s=2)


def test_last_values_keeps_the_last_value_of_each_key_and_a_tombstone_removes_it() -> None:
    changes = [("a", 1), ("b", 2), ("a", 3), ("b", None), ("c", None)]
    assert last_values(changes) == {"a": 3}


def test_repeated_keys_are_those_of_changes_that_leave_their_key_as_it_was() -> None:
    changes = [("a", 1), ("b", 2), ("a", 3), ("a", 3), ("b", None), ("b", None), ("c", None)]
    assert repeated_keys(changes) == ["a", "b", "c"]  # a tombstone of no value repeats too
    assert repeated_keys([("a", 1), ("a", None), ("a", 1)]) == []  # corrections
