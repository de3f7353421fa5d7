"""Group error paths on the wire (no client library smoothing them over)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.heartbeat.v3.request import HeartbeatRequest
from kio.schema.leave_group.v3.request import LeaveGroupRequest, MemberIdentity
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.sync_group.v3.request import SyncGroupRequest, SyncGroupRequestAssignment

from riverbed.log import SimpleRecord, build_batch
from tests.support.brokers import BrokerProcess, create_topic
from tests.support.wire import WireClient, commit, delete_group, join, produce_request

OFFSET_COMMIT, FIND_COORDINATOR, JOIN, HEARTBEAT, LEAVE, SYNC = 8, 10, 11, 12, 13, 14
METADATA, DELETE_GROUPS, PRODUCE = 3, 42, 0


def heartbeat(client: WireClient, group: str, member_id: str, generation: int) -> ErrorCode:
    body = HeartbeatRequest(
        group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None
    )
    return client.request(HEARTBEAT, 3, body).error_code  # type: ignore[no-any-return]


def test_group_errors_on_the_wire(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, "w", partitions=1)
    with WireClient(bootstrap) as client:
        found = client.request(
            FIND_COORDINATOR, 4, FindCoordinatorRequest(key_type=0, coordinator_keys=("g", "h"))
        )
        assert [(c.key, c.error_code, c.port) for c in found.coordinators] == [
            ("g", ErrorCode.none, int(bootstrap.rsplit(":", 1)[1])),
            ("h", ErrorCode.none, int(bootstrap.rsplit(":", 1)[1])),
        ]
        first = join(client, "g")
        assert first.error_code == ErrorCode.member_id_required
        joined = join(client, "g", first.member_id)
        assert (joined.error_code, joined.generation_id) == (ErrorCode.none, 1)
        member = joined.member_id
        synced = client.request(
            SYNC,
            3,
            SyncGroupRequest(
                group_id="g",
                generation_id=1,
                member_id=member,
                group_instance_id=None,
                assignments=(SyncGroupRequestAssignment(member_id=member, assignment=b"a"),),
            ),
        )
        assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"a")

        assert heartbeat(client, "g", member, 1) == ErrorCode.none
        assert heartbeat(client, "g", member, 2) == ErrorCode.illegal_generation
        assert heartbeat(client, "g", "stranger", 1) == ErrorCode.unknown_member_id
        assert commit(client, "g", member, 0) == ErrorCode.illegal_generation
        assert commit(client, "g", "stranger", 1) == ErrorCode.unknown_member_id
        assert commit(client, "g", member, 1) == ErrorCode.none
        assert commit(client, "nobody-yet", "", -1) == ErrorCode.none  # a "simple" group
        assert commit(client, "gone", "x", 3) == ErrorCode.illegal_generation

        assert delete_group(client, "g") == ErrorCode.non_empty_group
        assert delete_group(client, "no-such-group") == ErrorCode.group_id_not_found
        left = client.request(
            LEAVE,
            3,
            LeaveGroupRequest(
                group_id="g",
                members=(
                    MemberIdentity(member_id=member, group_instance_id=None),
                    MemberIdentity(member_id="stranger", group_instance_id=None),
                ),
            ),
        )
        assert [m.error_code for m in left.members] == [
            ErrorCode.none,
            ErrorCode.unknown_member_id,
        ]
        assert delete_group(client, "g") == ErrorCode.none
        assert delete_group(client, "g") == ErrorCode.group_id_not_found

        # __consumer_offsets now exists: internal, and no client may write to it.
        metadata = client.request(
            METADATA,
            12,
            MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name="__consumer_offsets"),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
        )
        (topic,) = metadata.topics
        assert (topic.error_code, topic.is_internal, len(topic.partitions)) == (
            ErrorCode.none,
            True,
            50,
        )
        batch = build_batch([SimpleRecord(key=b"k", value=b"v")])
        produced = client.request(PRODUCE, 9, produce_request("__consumer_offsets", batch, acks=1))
        error = produced.responses[0].partition_responses[0].error_code
        assert error == ErrorCode.invalid_topic_exception
