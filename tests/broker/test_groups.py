"""Classic consumer groups with librdkafka (confluent-kafka) against a real broker process."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from riverbed.broker import Broker
from tests.support.brokers import (
    GROUPS_FAST,
    BrokerProcess,
    create_topic,
    running_broker,
    start_broker_process,
)
from tests.support.groups import consumer, poll_all, produce, values

FAST = GROUPS_FAST


@pytest.fixture
def delayed_group_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker whose first rebalance of a new group waits 1 s for more members (Kafka's
    initial delay, shortened), so consumers subscribing together share the first generation."""
    yield from running_broker(tmp_path, "--set", "group.initial.rebalance.delay.ms=1000")


def test_two_consumers_split_then_one_takes_over_from_commits(
    delayed_group_broker: BrokerProcess,
) -> None:
    bootstrap = delayed_group_broker.bootstrap
    create_topic(bootstrap, "split", partitions=6)
    produce(bootstrap, "split", 600)
    a, b = consumer(bootstrap, "g"), consumer(bootstrap, "g")
    a.subscribe(["split"])
    b.subscribe(["split"])
    got = poll_all([a, b], 600)
    assert sorted(values(got[0] + got[1])) == list(range(600)), "every record exactly once"
    assert len(got[0]) == len(got[1]) == 300, "3 partitions each"
    parts_a = {m.partition() for m in got[0]}
    parts_b = {m.partition() for m in got[1]}
    assert len(parts_a) == len(parts_b) == 3 and not parts_a & parts_b
    b.close()  # LeaveGroup: a takes every partition at once
    produce(bootstrap, "split", 600, start=600)
    rest = poll_all([a], 600)
    assert sorted(values(rest[0])) == list(range(600, 1200)), "continues from b's commits"
    assert {p.partition for p in a.assignment()} == set(range(6))
    committed = a.committed([TopicPartition("split", p) for p in range(6)], timeout=10)
    assert [tp.offset for tp in committed] == [200] * 6
    a.close()


@pytest.mark.parametrize("crash", [False, True], ids=["clean-restart", "kill-9"])
def test_committed_offsets_survive_a_restart(tmp_path: Path, crash: bool) -> None:
    data_dir = tmp_path / "data"
    first = start_broker_process(data_dir, extra_args=FAST)
    try:
        create_topic(first.bootstrap, "kept", partitions=6)
        produce(first.bootstrap, "kept", 120)
        c = consumer(first.bootstrap, "durable")
        c.subscribe(["kept"])
        got = poll_all([c], 60)
        metadata = "riverbed meta"
        c.commit(
            offsets=[
                TopicPartition("kept", p, 10 + p, metadata=metadata, leader_epoch=0)
                for p in range(6)
            ],
            asynchronous=False,
        )
        assert got
        c.close()
    finally:
        if crash:
            first.kill()
        else:
            assert first.stop() == 0, first.log_text()
    second = start_broker_process(data_dir, listen=first.bootstrap, extra_args=FAST)
    try:
        c = consumer(second.bootstrap, "durable")
        committed = c.committed([TopicPartition("kept", p) for p in range(6)], timeout=30)
        assert [tp.offset for tp in committed] == [10 + p for p in range(6)]
        assert {tp.metadata for tp in committed} == {metadata}
        assert {tp.leader_epoch for tp in committed} == {0}
        c.subscribe(["kept"])
        resumed = poll_all([c], 120 - sum(10 + p for p in range(6)), commit=False)
        assert sorted(values(resumed[0])) == sorted(i for i in range(120) if i // 6 >= 10 + i % 6)
        c.close()
    finally:
        second.kill()


def test_static_member_restart_causes_no_rebalance(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, "static", partitions=4)
    produce(bootstrap, "static", 40, partitions=4)
    revoked: list[tuple[str, list[int]]] = []

    def member(instance: str) -> Consumer:
        c = consumer(
            bootstrap, "sg", **{"group.instance.id": instance, "session.timeout.ms": 10000}
        )
        c.subscribe(
            ["static"],
            on_revoke=lambda _c, parts: revoked.append((instance, [p.partition for p in parts])),
        )
        return c

    a, b = member("a"), member("b")
    poll_all([a, b], 40)
    assignment_a = sorted(tp.partition for tp in a.assignment())
    assert len(assignment_a) == 2
    b.close()  # a static member's close sends no LeaveGroup: it keeps its place
    revoked.clear()  # the startup rebalances and b's own close
    b = member("b")
    produce(bootstrap, "static", 40, start=40, partitions=4)
    got = poll_all([a, b], 40)
    assert len(got[1]) == 20, "b got its old partitions back"
    assert sorted(tp.partition for tp in a.assignment()) == assignment_a
    assert revoked == [], "nobody's partitions were revoked: no rebalance"
    a.close()
    b.close()


def test_cooperative_sticky_incremental_rebalance(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, "coop", partitions=6)
    produce(bootstrap, "coop", 300)
    revoked: list[set[int]] = []
    strategy = {"partition.assignment.strategy": "cooperative-sticky"}
    a = consumer(bootstrap, "cg", **strategy)
    a.subscribe(["coop"], on_revoke=lambda _c, parts: revoked.append({p.partition for p in parts}))
    first = poll_all([a], 300)
    assert {tp.partition for tp in a.assignment()} == set(range(6))
    b = consumer(bootstrap, "cg", **strategy)
    b.subscribe(["coop"])
    deadline = time.monotonic() + 30
    while not b.assignment() or len(a.assignment()) != 3:
        assert time.monotonic() < deadline, (a.assignment(), b.assignment())
        for c in (a, b):
            message = c.poll(0.05)
            assert message is None or not message.error()
    kept = {tp.partition for tp in a.assignment()}
    assert revoked == [set(range(6)) - kept], "only the partitions given away were revoked"
    produce(bootstrap, "coop", 300, start=300)
    second = poll_all([a, b], 300)
    assert sorted(values(first[0] + second[0] + second[1])) == list(range(600))
    a.close()
    b.close()


def test_offsets_of_an_empty_group_expire(tmp_path: Path) -> None:
    """A broker in-process with a clock the test moves: retention 1 minute, checked every
    50 ms of that clock's time (the check's timer runs on the event loop)."""
    offset_ms = [0]

    def clock() -> int:
        return time.time_ns() // 1_000_000 + offset_ms[0]

    config = {
        "offsets.retention.minutes": "1",
        "offsets.retention.check.interval.ms": "50",
        "group.initial.rebalance.delay.ms": "0",
    }
    with Broker(tmp_path / "data", listen="127.0.0.1:0", config=config, clock=clock) as broker:
        bootstrap = broker.bootstrap_servers
        create_topic(bootstrap, "exp", partitions=1)
        c = consumer(bootstrap, "expiring")
        c.commit(offsets=[TopicPartition("exp", 0, 3)], asynchronous=False)
        assert c.committed([TopicPartition("exp", 0)], timeout=10)[0].offset == 3
        time.sleep(0.3)
        assert c.committed([TopicPartition("exp", 0)], timeout=10)[0].offset == 3, "not yet"
        offset_ms[0] = 61_000
        deadline = time.monotonic() + 10
        while c.committed([TopicPartition("exp", 0)], timeout=10)[0].offset == 3:
            assert time.monotonic() < deadline, "offsets never expired"
            time.sleep(0.05)
        assert c.committed([TopicPartition("exp", 0)], timeout=10)[0].offset < 0
        admin = AdminClient({"bootstrap.servers": bootstrap})
        listed = admin.list_consumer_groups().result(timeout=10)
        assert "expiring" not in {g.group_id for g in listed.valid}
        c.close()
