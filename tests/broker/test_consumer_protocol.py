"""``group.protocol=consumer`` (KIP-848) against a real broker: on the wire and with librdkafka."""

from __future__ import annotations

import contextlib
import datetime
import subprocess
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.errors import ErrorCode

from riverbed.broker import Broker
from tests.support.brokers import create_topic, start_broker_process
from tests.support.groups import kip848_consumer
from tests.support.wire import WireClient

HEARTBEAT, DESCRIBE = 68, 69


def join(group: str, member_id: str, topics: tuple[str, ...]) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout=datetime.timedelta(milliseconds=30_000),
        subscribed_topic_names=topics,
        subscribed_topic_regex="",
        topic_partitions=(),
    )


def test_heartbeat_and_describe_on_the_wire(tmp_path: Path) -> None:
    with Broker(tmp_path / "data", listen="127.0.0.1:0") as broker:
        create_topic(broker.bootstrap_servers, "orders", partitions=3)
        member_id = str(uuid.uuid4())
        with WireClient(broker.bootstrap_servers) as wire:
            joined = wire.request(HEARTBEAT, 1, join("g", member_id, ("orders",)))
            assert joined.error_code == ErrorCode.none
            assert joined.member_id == member_id and joined.member_epoch == 1
            assert joined.heartbeat_interval == datetime.timedelta(seconds=5)
            assert joined.assignment is not None
            [assigned] = joined.assignment.topic_partitions
            assert sorted(assigned.partitions) == [0, 1, 2]

            stale = wire.request(
                HEARTBEAT,
                1,
                ConsumerGroupHeartbeatRequest(
                    group_id="g", member_id=member_id, member_epoch=5, topic_partitions=None
                ),
            )
            assert stale.error_code == ErrorCode.fenced_member_epoch

            described = wire.request(
                DESCRIBE,
                1,
                ConsumerGroupDescribeRequest(
                    group_ids=("g", "nope"), include_authorized_operations=False
                ),
            )
            group, missing = described.groups
            assert group.error_code == ErrorCode.none and group.group_state == "Stable"
            assert group.group_epoch == 1 and group.assignor_name == "uniform"
            [member] = group.members
            assert member.member_id == member_id and member.member_epoch == 1
            [topic] = member.assignment.topic_partitions
            assert topic.topic_name == "orders" and sorted(topic.partitions) == [0, 1, 2]
            assert missing.error_code == ErrorCode.group_id_not_found

            left = wire.request(
                HEARTBEAT,
                1,
                ConsumerGroupHeartbeatRequest(
                    group_id="g", member_id=member_id, member_epoch=-1, topic_partitions=None
                ),
            )
            assert left.error_code == ErrorCode.none and left.member_epoch == -1


# -- librdkafka with group.protocol=consumer -------------------------------------------------

FAST = (
    "--set",
    "group.consumer.heartbeat.interval.ms=300",
    "--set",
    "group.consumer.session.timeout.ms=3000",
)


def produce(bootstrap: str, topic: str, count: int, *, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(start, start + count):
        producer.produce(topic, key=str(i).encode(), value=str(i).encode())
    assert producer.flush(30) == 0


def poll_until(
    consumers: list[Consumer], seen: dict[str, list[int]], *, want: int, timeout_s: float = 30
) -> None:
    """Poll each consumer in turn, committing what it read, until ``want`` records arrived."""
    deadline = time.monotonic() + timeout_s
    while sum(len(v) for v in seen.values()) < want and time.monotonic() < deadline:
        for c in consumers:
            message = c.poll(0.05)
            if message is None or message.error() is not None:
                continue
            seen.setdefault(c.memberid() or "", []).append(int(message.value()))
            commit(c, message, deadline=deadline)


def commit(c: Consumer, message: Message, *, deadline: float) -> None:
    """Commit synchronously, retrying STALE_MEMBER_EPOCH as the Java client does: the member
    committed with the epoch it had before its latest heartbeat answer (a new assignment);
    Kafka answers the same and the member retries once its epoch is current."""
    while True:
        try:
            c.commit(message=message, asynchronous=False)
            return
        except KafkaException as e:
            if e.args[0].code() != KafkaError.STALE_MEMBER_EPOCH or time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # librdkafka's own thread takes in the heartbeat answer


def test_two_consumers_split_a_topic_then_one_takes_over(tmp_path: Path) -> None:
    broker = start_broker_process(tmp_path / "data", extra_args=FAST)
    opened: list[Consumer] = []
    try:
        bootstrap = broker.bootstrap
        create_topic(bootstrap, "clicks", partitions=6)
        produce(bootstrap, "clicks", 600)
        a, b = kip848_consumer(bootstrap, "split"), kip848_consumer(bootstrap, "split")
        opened.extend([a, b])
        a.subscribe(["clicks"])
        b.subscribe(["clicks"])
        seen: dict[str, list[int]] = {}
        poll_until([a, b], seen, want=600)
        every = sorted(v for values in seen.values() for v in values)
        assert every == list(range(600)), "every record exactly once"
        # a may have read everything alone before b joined: the split still has to come.
        deadline = time.monotonic() + 15
        while (len(a.assignment()), len(b.assignment())) != (3, 3):
            assert time.monotonic() < deadline, (a.assignment(), b.assignment())
            for member in (a, b):
                assert member.poll(0.05) is None, "no record twice"
        assert not {p.partition for p in a.assignment()} & {p.partition for p in b.assignment()}

        b.close()  # leaves with epoch -1: a takes every partition from the committed offsets
        produce(bootstrap, "clicks", 300, start=600)
        more: dict[str, list[int]] = {}
        poll_until([a], more, want=300)
        assert sorted(v for values in more.values() for v in values) == list(range(600, 900))
        assert len(a.assignment()) == 6
    finally:
        for c in opened:  # close while the broker is up: a consumer left open may hang at exit
            with contextlib.suppress(RuntimeError):
                c.close()
        broker.kill()


def test_session_timeout_removes_a_killed_member(tmp_path: Path) -> None:
    broker = start_broker_process(tmp_path / "data", extra_args=FAST)
    try:
        bootstrap = broker.bootstrap
        create_topic(bootstrap, "views", partitions=4)
        produce(bootstrap, "views", 40)
        script = (
            "import sys, time, confluent_kafka as ck\n"
            "c = ck.Consumer({'bootstrap.servers': sys.argv[1], 'group.id': 'crash',"
            " 'group.protocol': 'consumer', 'auto.offset.reset': 'earliest'})\n"
            "c.subscribe(['views'])\n"
            "while True:\n"
            "    c.poll(0.1)\n"
            "    if c.assignment(): print('assigned', flush=True)\n"
        )
        doomed = subprocess.Popen(
            [sys.executable, "-c", script, bootstrap], stdout=subprocess.PIPE, text=True
        )
        try:
            assert doomed.stdout is not None and doomed.stdout.readline() == "assigned\n"
            survivor = kip848_consumer(bootstrap, "crash")
            survivor.subscribe(["views"])
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and len(survivor.assignment()) != 2:
                survivor.poll(0.1)
            assert len(survivor.assignment()) == 2
        finally:
            doomed.kill()  # no leave heartbeat: only the 3 s session timeout can remove it
            doomed.wait()
            assert doomed.stdout is not None
            doomed.stdout.close()
        started = time.monotonic()
        while time.monotonic() - started < 15 and len(survivor.assignment()) != 4:
            survivor.poll(0.1)
        assert len(survivor.assignment()) == 4
        assert time.monotonic() - started >= 1.0, "removed by the session timeout, not at once"
        survivor.close()
    finally:
        broker.kill()
