"""Classic and consumer-protocol (KIP-848) groups are one set of groups, as in Kafka 4: the
admin APIs and offsets cover both, and a group id has one type. On the wire, then with
librdkafka's AdminClient."""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, ConsumerGroupType, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest as DescribeV5
from kio.schema.describe_groups.v6.request import DescribeGroupsRequest as DescribeV6
from kio.schema.errors import ErrorCode
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kio.schema.offset_fetch.v8.request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
)

from tests.support.brokers import BrokerProcess, create_topic
from tests.support.groups import kip848_consumer
from tests.support.wire import WireClient, commit, delete_group, join

OFFSET_FETCH, DESCRIBE_GROUPS, LIST_GROUPS, OFFSET_DELETE, CG_HEARTBEAT = 9, 15, 16, 47, 68


def cg_heartbeat(client: WireClient, group: str, member_id: str, *, epoch: int = 0) -> Any:
    body = ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        rebalance_timeout=datetime.timedelta(seconds=30),
        subscribed_topic_names=("w",) if epoch == 0 else None,
        subscribed_topic_regex="",
        topic_partitions=() if epoch == 0 else None,
    )
    return client.request(CG_HEARTBEAT, 1, body)


def listed(client: WireClient, *, types: tuple[str, ...] = (), states: tuple[str, ...] = ()) -> Any:
    response = client.request(
        LIST_GROUPS, 5, ListGroupsRequest(states_filter=states, types_filter=types)
    )
    assert response.error_code == ErrorCode.none
    return {g.group_id: (g.protocol_type, g.group_state, g.group_type) for g in response.groups}


def fetched(client: WireClient, group: str) -> Any:
    request = OffsetFetchRequest(
        groups=(
            OffsetFetchRequestGroup(
                group_id=group, topics=(OffsetFetchRequestTopics(name="w", partition_indexes=(0,)),)
            ),
        ),
        require_stable=False,
    )
    (answer,) = client.request(OFFSET_FETCH, 8, request).groups
    return answer.error_code, answer.topics[0].partitions[0].committed_offset


def delete_offset(client: WireClient, group: str) -> tuple[ErrorCode, ErrorCode | None]:
    request = OffsetDeleteRequest(
        group_id=group,
        topics=(
            OffsetDeleteRequestTopic(
                name="w", partitions=(OffsetDeleteRequestPartition(partition_index=0),)
            ),
        ),
    )
    response = client.request(OFFSET_DELETE, 0, request)
    if response.error_code != ErrorCode.none:
        return response.error_code, None
    return response.error_code, response.topics[0].partitions[0].error_code


def test_admin_and_offsets_cover_consumer_groups(group_broker: BrokerProcess) -> None:
    create_topic(group_broker.bootstrap, "w", partitions=1)
    with WireClient(group_broker.bootstrap) as client:
        member = str(uuid.uuid4())
        joined = cg_heartbeat(client, "kg", member)
        assert (joined.error_code, joined.member_epoch) == (ErrorCode.none, 1)
        first = join(client, "cg")
        assert join(client, "cg", first.member_id).error_code == ErrorCode.none

        assert listed(client) == {
            "kg": ("consumer", "Stable", "consumer"),
            "cg": ("consumer", "CompletingRebalance", "classic"),
        }
        assert set(listed(client, types=("Consumer",))) == {"kg"}
        assert set(listed(client, types=("classic",))) == {"cg"}
        assert set(listed(client, states=("stable",))) == {"kg"}

        # DescribeGroups is the classic protocol's: Dead before v6, GROUP_ID_NOT_FOUND from v6.
        (old,) = client.request(
            DESCRIBE_GROUPS, 5, DescribeV5(groups=("kg",), include_authorized_operations=False)
        ).groups
        assert (old.error_code, old.group_state, old.members) == (ErrorCode.none, "Dead", ())
        body = DescribeV6(groups=("kg", "cg", "nobody"), include_authorized_operations=False)
        kg, cg, nobody = client.request(DESCRIBE_GROUPS, 6, body).groups
        assert (kg.error_code, kg.group_state) == (ErrorCode.group_id_not_found, "Dead")
        assert kg.error_message == "Group kg is not a classic group."
        assert (cg.error_code, cg.group_state) == (ErrorCode.none, "CompletingRebalance")
        assert (nobody.error_code, nobody.error_message) == (
            ErrorCode.group_id_not_found,
            "Group nobody not found.",
        )

        # One group id, one type.
        assert join(client, "kg").error_code == ErrorCode.inconsistent_group_protocol
        refused = cg_heartbeat(client, "cg", str(uuid.uuid4()))
        assert refused.error_code == ErrorCode.group_id_not_found
        assert refused.error_message == "Group cg is not a consumer group."

        # Offsets: committed with the member epoch, fetched, not deletable while subscribed.
        assert commit(client, "kg", member, 1) == ErrorCode.none
        assert commit(client, "kg", member, 7) == ErrorCode.stale_member_epoch
        assert fetched(client, "kg") == (ErrorCode.none, 5)
        assert delete_offset(client, "kg") == (ErrorCode.none, ErrorCode.group_subscribed_to_topic)
        assert delete_group(client, "kg") == ErrorCode.non_empty_group

        left = cg_heartbeat(client, "kg", member, epoch=-1)
        assert left.error_code == ErrorCode.none
        assert listed(client, types=("consumer",)) == {"kg": ("consumer", "Empty", "consumer")}
        assert delete_offset(client, "kg") == (ErrorCode.none, ErrorCode.none)
        assert fetched(client, "kg") == (ErrorCode.none, -1)
        assert commit(client, "kg", "", -1) == ErrorCode.none  # admin tools, no members
        assert delete_group(client, "kg") == ErrorCode.none
        assert "kg" not in listed(client)
        assert fetched(client, "kg") == (ErrorCode.none, -1)


def test_an_empty_group_changes_type(group_broker: BrokerProcess) -> None:
    """Kafka converts an empty group of the other type, keeping its committed offsets."""
    create_topic(group_broker.bootstrap, "w", partitions=1)
    with WireClient(group_broker.bootstrap) as client:
        assert commit(client, "g", "", -1) == ErrorCode.none  # a "simple" classic group
        assert listed(client)["g"] == ("", "Empty", "classic")
        member = str(uuid.uuid4())
        assert cg_heartbeat(client, "g", member).error_code == ErrorCode.none
        assert listed(client)["g"] == ("consumer", "Stable", "consumer")
        assert fetched(client, "g") == (ErrorCode.none, 5)

        assert cg_heartbeat(client, "g", member, epoch=-1).error_code == ErrorCode.none
        first = join(client, "g")
        assert first.error_code == ErrorCode.member_id_required
        assert join(client, "g", first.member_id).error_code == ErrorCode.none
        assert listed(client)["g"] == ("consumer", "CompletingRebalance", "classic")
        assert fetched(client, "g") == (ErrorCode.none, 5)


def test_admin_client_lists_and_describes_a_consumer_group(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, "w", partitions=2)
    c = kip848_consumer(bootstrap, "modern")
    c.subscribe(["w"])
    try:
        deadline = time.monotonic() + 30
        while len(c.assignment()) != 2:
            assert time.monotonic() < deadline, "never assigned"
            c.poll(0.1)
        c.commit(offsets=[TopicPartition("w", 0, 4)], asynchronous=False)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        listings = admin.list_consumer_groups(request_timeout=10).result(timeout=15)
        (listing,) = [g for g in listings.valid if g.group_id == "modern"]
        assert listing.type == ConsumerGroupType.CONSUMER
        assert listing.state.name == "STABLE"
        description = admin.describe_consumer_groups(["modern"])["modern"].result(timeout=15)
        assert description.type == ConsumerGroupType.CONSUMER
        [member] = description.members
        assert {tp.partition for tp in member.assignment.topic_partitions} == {0, 1}
        request = [ConsumerGroupTopicPartitions("modern")]
        offsets = admin.list_consumer_group_offsets(request)["modern"].result(timeout=15)
        assert [(tp.partition, tp.offset) for tp in offsets.topic_partitions] == [(0, 4)]
    finally:
        c.close()
