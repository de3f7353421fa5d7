"""A minimal Kafka wire client for tests: riverbed's own client, with the client id "tests";
and the requests several wire tests send (produce, join a classic group, commit, delete it).

Real client libraries hide what the broker does on the wire (pipelining, acks=0, long
polls, error codes for corrupt input); ``riverbed.client.BrokerConnection`` speaks it
directly, one frame at a time, with ``riverbed.protocol``'s client codec, so there is one
implementation of both.
"""

from __future__ import annotations

import datetime
import socket
from typing import Any

from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.errors import ErrorCode
from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from riverbed.client import BrokerConnection, split_address
from riverbed.protocol import encode_request

CLIENT_ID = "tests"
OFFSET_COMMIT, JOIN, DELETE_GROUPS = 8, 11, 42


class WireClient(BrokerConnection):
    """``send``, ``send_raw``, ``receive`` and ``request`` on one connection to ``bootstrap``;
    a closed connection raises ``ConnectionError``."""

    def __init__(self, bootstrap: str, *, timeout_s: float = 10) -> None:
        sock = socket.create_connection(split_address(bootstrap), timeout=timeout_s)
        super().__init__(sock, client_id=CLIENT_ID)

    @staticmethod
    def encode(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
        """A whole request frame, to send with ``send_raw`` (pipelined or tampered with)."""
        return encode_request(api_key, version, correlation_id, body, client_id=CLIENT_ID)


def produce_request(topic: str, batch: bytes, *, acks: int) -> ProduceRequest:
    """A Produce request (v9) of ``batch`` to partition 0 of ``topic``."""
    return ProduceRequest(
        acks=acks,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            TopicProduceData(
                name=topic, partition_data=(PartitionProduceData(index=0, records=batch),)
            ),
        ),
    )


def join(client: WireClient, group: str, member_id: str = "") -> Any:
    """JoinGroup v5 of a classic consumer group (protocol "range"); the response."""
    return client.request(
        JOIN,
        5,
        JoinGroupRequest(
            group_id=group,
            session_timeout=datetime.timedelta(seconds=10),
            rebalance_timeout=datetime.timedelta(seconds=10),
            member_id=member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocols=(JoinGroupRequestProtocol(name="range", metadata=b"m"),),
        ),
    )


def commit(client: WireClient, group: str, member_id: str, generation: int) -> ErrorCode:
    """OffsetCommit v8 of offset 5 of ``w``-0 for ``group``; its error code."""
    body = OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        group_instance_id=None,
        topics=(
            OffsetCommitRequestTopic(
                name="w",
                partitions=(
                    OffsetCommitRequestPartition(
                        partition_index=0,
                        committed_offset=5,
                        committed_leader_epoch=-1,
                        committed_metadata=None,
                    ),
                ),
            ),
        ),
    )
    return client.request(OFFSET_COMMIT, 8, body).topics[0].partitions[0].error_code  # type: ignore[no-any-return]


def delete_group(client: WireClient, group: str) -> ErrorCode:
    """DeleteGroups v2 of ``group``; its error code."""
    response = client.request(DELETE_GROUPS, 2, DeleteGroupsRequest(groups_names=(group,)))
    return response.results[0].error_code  # type: ignore[no-any-return]
