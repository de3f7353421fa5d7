"""Golden frames: kafka-python 3.0.12 encodes requests and decodes responses, independent of kio."""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Callable
from typing import Any

import pytest

# kafka-python 3.0.12 loads its JSON schemas with importlib.resources.read_text, deprecated
# since Python 3.11; tests run with warnings as errors.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.admin.cluster import DescribeClusterRequest, DescribeClusterResponse
    from kafka.protocol.admin.configs import DescribeConfigsRequest, DescribeConfigsResponse
    from kafka.protocol.admin.topics import (
        CreatePartitionsRequest,
        CreateTopicsRequest,
        CreateTopicsResponse,
        DeleteTopicsRequest,
    )
    from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
    from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
    from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
    from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
    from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
    from kafka.protocol.producer.transaction import InitProducerIdRequest, InitProducerIdResponse

from riverbed.protocol import ApiKey, FrameReader, decode_request, encode_response
from riverbed.protocol._shape import shape_entity
from riverbed.protocol.codec import _response_plan

RECORDS = bytes(range(256)) * 40  # opaque to the codec: any bytes must pass through unchanged
TOPIC_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")

P = ProduceRequest
F = FetchRequest
L = ListOffsetsRequest
C = CreateTopicsRequest


def _produce(v: int) -> Any:
    part = P.TopicProduceData.PartitionProduceData(index=3, records=RECORDS)
    topic = P.TopicProduceData(name="events", partition_data=[part])
    return P[v](transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[topic])


def _fetch(v: int) -> Any:
    part = F.FetchTopic.FetchPartition(
        partition=0, current_leader_epoch=-1, fetch_offset=42, log_start_offset=-1,
        partition_max_bytes=1048576,
    )  # fmt: skip
    topic = F.FetchTopic(topic="events", partitions=[part])
    return F[v](
        replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=52428800, isolation_level=1,
        session_id=0, session_epoch=-1, topics=[topic], forgotten_topics_data=[], rack_id="",
    )  # fmt: skip


def _list_offsets(v: int) -> Any:
    part = L.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=1, current_leader_epoch=-1, timestamp=-2
    )
    return L[v](
        replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(name="t", partitions=[part])]
    )


def _metadata(v: int) -> Any:
    topics = [MetadataRequest.MetadataRequestTopic(name="t1")]
    return MetadataRequest[v](topics=topics, allow_auto_topic_creation=True)


def _create_topics(v: int) -> Any:
    config = C.CreatableTopic.CreatableTopicConfig(name="cleanup.policy", value="compact")
    topic = C.CreatableTopic(
        name="t", num_partitions=3, replication_factor=1, assignments=[], configs=[config]
    )
    return C[v](topics=[topic], timeout_ms=5000, validate_only=False)


REQUESTS: list[tuple[ApiKey, int, Callable[[int], Any]]] = [
    *[(ApiKey.PRODUCE, v, _produce) for v in (3, 7, 8, 9, 11)],
    *[(ApiKey.FETCH, v, _fetch) for v in (4, 10, 11, 12)],
    *[(ApiKey.LIST_OFFSETS, v, _list_offsets) for v in (1, 5, 7)],
    *[(ApiKey.METADATA, v, _metadata) for v in (0, 1, 5, 9, 12)],
    *[(ApiKey.CREATE_TOPICS, v, _create_topics) for v in (2, 5, 7)],
    *[(ApiKey.API_VERSIONS, v, lambda v: ApiVersionsRequest[v]()) for v in (0, 1, 2)],
    (
        ApiKey.API_VERSIONS,
        3,
        lambda v: ApiVersionsRequest[v](client_software_name="kp", client_software_version="3"),
    ),
    (
        ApiKey.DELETE_TOPICS,
        4,
        lambda v: DeleteTopicsRequest[v](topic_names=["a", "b"], timeout_ms=1),
    ),
    (
        ApiKey.CREATE_PARTITIONS,
        2,
        lambda v: CreatePartitionsRequest[v](
            topics=[
                CreatePartitionsRequest.CreatePartitionsTopic(name="t", count=6, assignments=None)
            ],
            timeout_ms=1000,
            validate_only=False,
        ),
    ),
    (
        ApiKey.INIT_PRODUCER_ID,
        4,
        lambda v: InitProducerIdRequest[v](
            transactional_id=None, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1
        ),
    ),
    (
        ApiKey.DESCRIBE_CONFIGS,
        4,
        lambda v: DescribeConfigsRequest[v](
            resources=[
                DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=2, resource_name="t", configuration_keys=None
                )
            ],
            include_synonyms=False,
            include_documentation=False,
        ),
    ),
    (
        ApiKey.DESCRIBE_CLUSTER,
        1,
        lambda v: DescribeClusterRequest[v](
            include_cluster_authorized_operations=False, endpoint_type=1
        ),
    ),
]


@pytest.mark.parametrize(("api_key", "version", "make"), REQUESTS, ids=lambda x: str(x))
def test_kafka_python_request_decodes(
    api_key: ApiKey, version: int, make: Callable[[int], Any], assert_same: Any
) -> None:
    message = make(version)
    message.with_header(correlation_id=1234, client_id="golden-client")
    frame = bytes(message.encode(header=True, framed=True))

    reader = FrameReader(max_frame_bytes=1 << 20)
    reader.receive_data(frame)
    body = reader.next_frame()
    assert body is not None
    request = decode_request(body)

    assert (request.api_key, request.api_version) == (api_key, version)
    assert request.correlation_id == 1234
    assert request.client_id == "golden-client"
    assert type(request.body).__version__ == version
    assert_same(request.body, message.to_dict(json=False))


def _decode_with_kafka_python(cls: Any, version: int, frame: bytes, correlation_id: int) -> Any:
    response = cls.decode(frame, version=version, header=True, framed=True)
    assert response.header.correlation_id == correlation_id
    return response


def _request(api_key: ApiKey, version: int, correlation_id: int = 99) -> Any:
    from riverbed.protocol import Request

    return Request(
        api_key=api_key,
        api_version=version,
        correlation_id=correlation_id,
        client_id="c",
        body=None,
    )


def _metadata_body() -> dict[str, Any]:
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 9092, "rack": None}],
        "cluster_id": "riverbed",
        "controller_id": 1,
        "topics": [
            {
                "error_code": 0,
                "name": "t1",
                "topic_id": TOPIC_ID,
                "partitions": [
                    {"partition_index": p, "leader_id": 1, "replica_nodes": [1], "isr_nodes": [1]}
                    for p in range(3)
                ],
            }
        ],
    }


def _fetch_body() -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "session_id": 0,
        "responses": [
            {
                "topic": "events",
                "partitions": [
                    {
                        "partition_index": 0,
                        "high_watermark": 100,
                        "last_stable_offset": 100,
                        "log_start_offset": 0,
                        "aborted_transactions": [],
                        "records": memoryview(RECORDS),
                    }
                ],
            }
        ],
    }


RESPONSES: list[tuple[ApiKey, int, Any, Callable[[], Any]]] = [
    *[(ApiKey.METADATA, v, MetadataResponse, _metadata_body) for v in (0, 1, 5, 9, 12)],
    *[(ApiKey.FETCH, v, FetchResponse, _fetch_body) for v in (4, 7, 11, 12)],
    *[
        (
            ApiKey.PRODUCE,
            v,
            ProduceResponse,
            lambda: {
                "responses": [
                    {"name": "events", "partition_responses": [{"index": 3, "base_offset": 7}]}
                ],
                "throttle_time_ms": 0,
            },
        )
        for v in (3, 8, 9, 11)
    ],
    *[
        (
            ApiKey.LIST_OFFSETS,
            v,
            ListOffsetsResponse,
            lambda: {
                "topics": [
                    {
                        "name": "t",
                        "partitions": [{"partition_index": 1, "timestamp": -1, "offset": 55}],
                    }
                ]
            },
        )
        for v in (1, 5, 7)
    ],
    *[
        (
            ApiKey.CREATE_TOPICS,
            v,
            CreateTopicsResponse,
            lambda: {"topics": [{"name": "t", "error_code": 36, "error_message": "exists"}]},
        )
        for v in (2, 5, 7)
    ],
    (
        ApiKey.INIT_PRODUCER_ID,
        4,
        InitProducerIdResponse,
        lambda: {"producer_id": 1000, "producer_epoch": 0},
    ),
    (
        ApiKey.DESCRIBE_CONFIGS,
        4,
        DescribeConfigsResponse,
        lambda: {
            "results": [
                {
                    "resource_type": 2,
                    "resource_name": "t",
                    "configs": [{"name": "retention.ms", "value": "604800000", "read_only": False}],
                }
            ]
        },
    ),
    (
        ApiKey.DESCRIBE_CLUSTER,
        1,
        DescribeClusterResponse,
        lambda: {
            "cluster_id": "riverbed",
            "controller_id": 1,
            "brokers": [{"broker_id": 1, "host": "127.0.0.1", "port": 9092}],
        },
    ),
]


@pytest.mark.parametrize(("api_key", "version", "cls", "body"), RESPONSES, ids=lambda x: str(x))
def test_dict_response_decodes_with_kafka_python(
    api_key: ApiKey, version: int, cls: Any, body: Callable[[], Any], assert_same: Any
) -> None:
    frame = encode_response(_request(api_key, version), body())
    decoded = _decode_with_kafka_python(cls, version, frame, correlation_id=99)
    schema = _response_plan(api_key, version)[0]
    assert_same(shape_entity(schema, body()), decoded.to_dict(json=False))


def test_fields_missing_from_old_versions_are_dropped() -> None:
    frame = encode_response(_request(ApiKey.METADATA, 0), _metadata_body())
    decoded = _decode_with_kafka_python(MetadataResponse, 0, frame, correlation_id=99)
    as_dict = decoded.to_dict(json=False)
    assert "cluster_id" not in as_dict
    assert [p["partition_index"] for p in as_dict["topics"][0]["partitions"]] == [0, 1, 2]


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_api_versions_response_uses_header_v0(version: int) -> None:
    from riverbed.protocol import api_versions_body

    frame = encode_response(_request(ApiKey.API_VERSIONS, version, 5), api_versions_body())
    # Header v0: size, correlation id, then the body starts with error_code 0 (no tag byte).
    assert frame[4:8] == (5).to_bytes(4, "big")
    assert frame[8:10] == b"\x00\x00"
    decoded = _decode_with_kafka_python(ApiVersionsResponse, version, frame, 5)
    keys = {k.api_key: (k.min_version, k.max_version) for k in decoded.api_keys}
    assert keys[0] == (0, 11)
    assert keys[18] == (0, 4)


def test_librdkafka_metadata_v12_with_trailing_bytes_decodes() -> None:
    # Captured from confluent-kafka 2.16.1's AdminClient.list_topics(): after the v12 body
    # (null topics, two booleans, no tags) librdkafka sends 3 more bytes; Kafka serves it.
    frame = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    request = decode_request(frame)
    assert request.api_key == ApiKey.METADATA
    assert request.api_version == 12
    assert request.client_id == "rdkafka"
    assert request.body.topics is None
