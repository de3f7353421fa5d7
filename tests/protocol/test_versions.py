"""Version policy: ApiVersions answers, unsupported versions, header quirks."""

from __future__ import annotations

import struct
import warnings

import pytest
from kio.index import load_request_schema

from riverbed.protocol import (
    SUPPORTED_APIS,
    ApiKey,
    ErrorCode,
    LocalProtocolError,
    UnsupportedVersionError,
    advertised_apis,
    api_versions_body,
    decode_request,
    encode_response,
    encode_unsupported_version,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse


def _header(api_key: int, version: int, correlation_id: int, client_id: bytes | None) -> bytes:
    raw = struct.pack(">hhi", api_key, version, correlation_id)
    if client_id is None:
        return raw + struct.pack(">h", -1)
    return raw + struct.pack(">h", len(client_id)) + client_id


def test_every_table_version_has_a_kio_schema() -> None:
    for key, versions in SUPPORTED_APIS.items():
        assert versions.advertised_min <= versions.min_implemented <= versions.max
        for v in range(versions.min_implemented, versions.max + 1):
            load_request_schema(key, v)


def test_librdkafka_feature_overlaps() -> None:
    # src/rdkafka_feature.c: ranges that must overlap the advertised ones.
    needs = {
        ApiKey.PRODUCE: (0, 0),  # old librdkafka compression check (librdkafka#4956)
        ApiKey.FETCH: (4, 4),  # MsgVer2
        ApiKey.FIND_COORDINATOR: (0, 0),
        ApiKey.JOIN_GROUP: (0, 0),
        ApiKey.SYNC_GROUP: (0, 0),
        ApiKey.HEARTBEAT: (0, 0),
        ApiKey.LEAVE_GROUP: (0, 0),
        ApiKey.OFFSET_COMMIT: (1, 2),
        ApiKey.OFFSET_FETCH: (1, 1),
        ApiKey.INIT_PRODUCER_ID: (0, 0),
        ApiKey.LIST_OFFSETS: (1, 1),
    }
    advertised = {a.api_key: a for a in advertised_apis(SUPPORTED_APIS.keys())}
    for key, (low, high) in needs.items():
        a = advertised[key]
        assert low <= a.max_version and a.min_version <= high, key
    assert (
        advertised[ApiKey.PRODUCE].max_version >= 7 and advertised[ApiKey.FETCH].max_version >= 10
    )


def test_kafka_python_infers_a_modern_broker() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.protocol.broker_version_data import infer_broker_version_from_api_versions
    served = {a.api_key: (a.min_version, a.max_version) for a in advertised_apis(SUPPORTED_APIS)}
    assert infer_broker_version_from_api_versions(served) >= (3, 8)


def test_advertised_apis_only_lists_served_keys() -> None:
    keys = [a.api_key for a in advertised_apis({ApiKey.METADATA})]
    assert keys == [ApiKey.METADATA, ApiKey.API_VERSIONS]


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_each_version(version: int) -> None:
    message = ApiVersionsRequest[min(version, 4)]()
    message.with_header(correlation_id=7, client_id="probe")
    request = decode_request(bytes(message.encode(header=True)))
    assert request.api_version == version
    frame = encode_response(request, api_versions_body(served=frozenset({ApiKey.PRODUCE})))
    decoded = ApiVersionsResponse.decode(frame, version=version, header=True, framed=True)
    assert decoded.header.correlation_id == 7
    assert decoded.error_code == 0
    assert {k.api_key for k in decoded.api_keys} == {0, 18}


def test_future_api_versions_gets_v0_unsupported_answer() -> None:
    frame = _header(18, 99, 31, b"future") + b"\xde\xad"  # body in a format we cannot know
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request(frame)
    error = info.value
    assert (error.api_key, error.api_version, error.correlation_id) == (18, 99, 31)
    answer = encode_unsupported_version(error.api_key, error.correlation_id)
    decoded = ApiVersionsResponse.decode(answer, version=0, header=True, framed=True)
    assert decoded.header.correlation_id == 31
    assert decoded.error_code == ErrorCode.unsupported_version
    assert (18, 0, 4) in {(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys}


def test_unsupported_version_answer_only_for_api_versions() -> None:
    with pytest.raises(LocalProtocolError):
        encode_unsupported_version(ApiKey.PRODUCE, 1)


@pytest.mark.parametrize(
    ("api_key", "version"),
    [(0, 0), (0, 2), (0, 12), (1, 3), (1, 13), (3, 13), (18, 5), (999, 0), (-1, 0), (4, 0)],
)
def test_unimplemented_versions_raise_unsupported(api_key: int, version: int) -> None:
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request(_header(api_key, version, 5, None) + b"\x00" * 16)
    assert info.value.correlation_id == 5


def test_null_client_id_and_legacy_client_id_in_flexible_header() -> None:
    # Metadata v12 is flexible: header v2 = v1 fields (client_id still int16-length) + tags.
    body = b"\x00" + b"\x01" + b"\x00" + b"\x00"  # topics=null, auto create, no ops, no tags
    frame = _header(3, 12, 9, None) + b"\x00" + body
    request = decode_request(frame)
    assert request.client_id is None
    assert request.body.topics is None
    frame = _header(3, 12, 9, "ünï".encode()) + b"\x00" + body
    assert decode_request(frame).client_id == "ünï"


def test_response_header_versions() -> None:
    from riverbed.protocol import Request

    def encoded(key: ApiKey, version: int) -> bytes:
        request = Request(
            api_key=key, api_version=version, correlation_id=3, client_id=None, body=None
        )
        return encode_response(request, {})

    # Metadata v8 (not flexible): header v0, body starts right after the correlation id.
    assert encoded(ApiKey.METADATA, 8)[4:8] == b"\x00\x00\x00\x03"
    v8, v9 = encoded(ApiKey.METADATA, 8), encoded(ApiKey.METADATA, 9)
    # Metadata v9 (flexible): header v1 adds an empty tag section (one 0 byte).
    assert v9[8] == 0
    assert struct.unpack(">i", v9[:4])[0] == len(v9) - 4
    assert struct.unpack(">i", v8[:4])[0] == len(v8) - 4
