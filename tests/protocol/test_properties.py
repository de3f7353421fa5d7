"""Hypothesis: round trips through kio's writers, truncation, trailing bytes, fuzzing, tags."""

from __future__ import annotations

import contextlib
import io
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from riverbed.protocol import (
    SUPPORTED_APIS,
    ApiKey,
    ProtocolError,
    RemoteProtocolError,
    Request,
    decode_request,
    encode_response,
)

ISSUE_2_APIS = [
    (ApiKey.API_VERSIONS, 3),
    (ApiKey.METADATA, 12),
    (ApiKey.METADATA, 1),
    (ApiKey.CREATE_TOPICS, 7),
    (ApiKey.DELETE_TOPICS, 6),
    (ApiKey.CREATE_PARTITIONS, 3),
    (ApiKey.PRODUCE, 9),
    (ApiKey.PRODUCE, 3),
    (ApiKey.FETCH, 12),
    (ApiKey.FETCH, 4),
    (ApiKey.LIST_OFFSETS, 7),
    (ApiKey.INIT_PRODUCER_ID, 4),
    (ApiKey.DESCRIBE_CONFIGS, 4),
    (ApiKey.DESCRIBE_CLUSTER, 1),
]
SETTINGS = settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow], deadline=None)


def _frame(api_key: int, version: int, body: Any, client_id: str | None = "c") -> bytes:
    schema = load_request_schema(api_key, version)
    header = struct.pack(">hhi", api_key, version, 77)
    if client_id is None:
        header += struct.pack(">h", -1)
    else:
        raw = client_id.encode()
        header += struct.pack(">h", len(raw)) + raw
    if schema.__flexible__:
        header += b"\x00"
    buffer = io.BytesIO()
    entity_writer(schema)(buffer, body)
    return header + buffer.getvalue()


def _bodies(api_key: ApiKey, version: int) -> st.SearchStrategy[Any]:
    return st.from_type(load_request_schema(api_key, version))


@pytest.mark.parametrize(("api_key", "version"), ISSUE_2_APIS, ids=str)
@SETTINGS
@given(data=st.data())
def test_request_round_trip(api_key: ApiKey, version: int, data: st.DataObject) -> None:
    body = data.draw(_bodies(api_key, version))
    client_id = data.draw(st.none() | st.text(max_size=20))
    request = decode_request(_frame(api_key, version, body, client_id))
    assert request.body == body
    assert request.client_id == client_id
    assert (request.api_key, request.api_version, request.correlation_id) == (
        api_key,
        version,
        77,
    )


@pytest.mark.parametrize(("api_key", "version"), ISSUE_2_APIS, ids=str)
@SETTINGS
@given(data=st.data())
def test_truncated_and_padded_frames(api_key: ApiKey, version: int, data: st.DataObject) -> None:
    frame = _frame(api_key, version, data.draw(_bodies(api_key, version)))
    for cut in range(len(frame)):
        with pytest.raises(RemoteProtocolError):
            decode_request(frame[:cut])
    # Kafka ignores bytes after the body (and librdkafka sends some): so do we.
    trailing = data.draw(st.binary(min_size=1, max_size=8))
    assert decode_request(frame + trailing).body == decode_request(frame).body


@pytest.mark.parametrize(("api_key", "version"), ISSUE_2_APIS, ids=str)
@SETTINGS
@given(data=st.data())
def test_response_round_trip(api_key: ApiKey, version: int, data: st.DataObject) -> None:
    schema = load_response_schema(api_key, version)
    body = data.draw(st.from_type(schema))
    request = Request(
        api_key=api_key, api_version=version, correlation_id=12, client_id=None, body=None
    )
    frame = encode_response(request, body)
    assert struct.unpack_from(">ii", frame) == (len(frame) - 4, 12)
    header_size = 9 if schema.__header_schema__.__version__ == 1 else 8
    decoded, size = entity_reader(schema)(frame, header_size)
    assert decoded == body
    assert header_size + size == len(frame)


@settings(max_examples=3000, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_protocol_errors(data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        decode_request(data)


@settings(max_examples=2000, deadline=None)
@given(
    st.sampled_from(sorted(SUPPORTED_APIS)),
    st.integers(min_value=0, max_value=12),
    st.binary(max_size=120),
)
def test_valid_header_random_body_raises_only_protocol_errors(
    api_key: ApiKey, version: int, body: bytes
) -> None:
    header = struct.pack(">hhih", api_key, version, 1, 1) + b"x"
    flexible = b"\x00" if body[:1] == b"\x00" else b""
    with contextlib.suppress(ProtocolError):
        decode_request(header + flexible + body)


def _with_unknown_tags(tags: bytes) -> bytes:
    # Metadata v12: topics = [{topic_id: zero, name: "t", tags}], auto-create, ops, tags.
    topic = b"\x00" * 16 + b"\x02t" + tags
    return b"\x02" + topic + b"\x01\x00" + tags


def test_unknown_tagged_fields_are_ignored() -> None:
    header = struct.pack(">hhih", 3, 12, 4, 0) + b"\x00"
    plain = decode_request(header + _with_unknown_tags(b"\x00"))
    # two unknown tags (90 and 9000) with payloads, in the body and in a nested struct
    tags = b"\x02" + b"\x5a\x03abc" + b"\xa8\x46\x01z"
    tagged = decode_request(header + _with_unknown_tags(tags))
    assert tagged.body == plain.body
    assert tagged.body.topics[0].name == "t"


def test_unknown_tag_in_request_header_is_ignored() -> None:
    header = struct.pack(">hhih", 3, 12, 4, 0) + b"\x01\x07\x02hi"
    assert decode_request(header + _with_unknown_tags(b"\x00")).body.topics[0].name == "t"


def test_unknown_tag_with_lying_length_is_remote_error() -> None:
    header = struct.pack(">hhih", 3, 12, 4, 0) + b"\x00"
    with pytest.raises(RemoteProtocolError):
        decode_request(header + _with_unknown_tags(b"\x01\x5a\x7fabc"))
