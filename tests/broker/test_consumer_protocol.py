"""``group.protocol=consumer`` (KIP-848) against a real broker: on the wire and with librdkafka."""

from __future__ import annotations

import datetime
import uuid
from pathlib import Path

from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.errors import ErrorCode

from riverbed.broker import Broker
from tests.broker.wire import WireClient
from tests.conftest import create_topic

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
