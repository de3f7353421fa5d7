"""The client side of the codec (``client_codec``, riverbed's own Kafka client's) against
the broker's side (``codec``): requests it reads, responses it wrote, every truncation of a
frame, and arbitrary bytes."""

from __future__ import annotations

import contextlib
import datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from riverbed.protocol import (
    ApiKey,
    MalformedResponseError,
    Request,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    request_body,
)
from tests.support.transactions import DESCRIBE, LIST, describe_answer

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def response_frame(api_key: ApiKey, version: int, body: dict[str, Any], *, cid: int = 9) -> bytes:
    """A response frame, without its size prefix, as the broker's codec encodes it."""
    request = Request(
        api_key=api_key, api_version=version, correlation_id=cid, client_id=None, body=None
    )
    return encode_response(request, body)[4:]


# --- the codec --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_key", "version", "fields"),
    [
        (ApiKey.API_VERSIONS, 0, {}),  # request header v1
        (LIST, 2, {"state_filters": ("Ongoing",), "transactional_id_pattern": "a.*"}),  # v2
        (ApiKey.METADATA, 1, {"topics": (), "allow_auto_topic_creation": False}),
    ],
)
def test_the_broker_reads_the_requests_this_client_encodes(
    api_key: ApiKey, version: int, fields: dict[str, Any]
) -> None:
    body = request_body(api_key, version, **fields)  # Metadata v1 has no auto-creation flag
    frame = encode_request(api_key, version, 77, body, client_id="me")
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    request = decode_request(frame[4:])
    assert (request.api_key, request.api_version, request.correlation_id) == (api_key, version, 77)
    assert (request.client_id, request.body) == ("me", body)


def test_a_start_time_of_minus_one_reads_as_none() -> None:
    """Kafka sends -1 for "no transaction"; kio alone refuses negative timestamps."""
    frame = response_frame(DESCRIBE, 0, describe_answer(-1, 0, 1_767_225_600_000))
    correlation_id, body = decode_response(DESCRIBE, 0, frame)
    assert correlation_id == 9
    starts = [state.transaction_start_time for state in body.transaction_states]
    assert starts == [None, EPOCH, EPOCH + datetime.timedelta(milliseconds=1_767_225_600_000)]
    assert body.transaction_states[2].topics[0].partitions == (0, 2)
    assert body.transaction_states[2].transaction_timeout == datetime.timedelta(seconds=60)


def test_api_versions_answers_have_header_v0_and_others_v1() -> None:
    versions = {"error_code": 0, "api_keys": [{"api_key": 66, "min_version": 0,
                                               "max_version": 2}], "throttle_time": 0}  # fmt: skip
    _, body = decode_response(ApiKey.API_VERSIONS, 0, response_frame(ApiKey.API_VERSIONS, 0,
                                                                     versions))  # fmt: skip
    assert [(a.api_key, a.max_version) for a in body.api_keys] == [(66, 2)]
    listing = {"error_code": 0, "unknown_state_filters": ["Sleeping"], "transaction_states": []}
    _, body = decode_response(LIST, 2, response_frame(LIST, 2, listing))
    assert body.unknown_state_filters == ("Sleeping",)


def test_every_truncation_is_a_malformed_response_and_trailing_bytes_are_ignored() -> None:
    frame = response_frame(DESCRIBE, 0, describe_answer(-1, 1_767_225_600_000))
    whole = decode_response(DESCRIBE, 0, frame)
    assert decode_response(DESCRIBE, 0, frame + b"\x00\x01") == whole
    for end in range(len(frame)):
        with pytest.raises(MalformedResponseError):
            decode_response(DESCRIBE, 0, frame[:end])


@given(st.binary(max_size=200))
def test_any_bytes_decode_or_raise_malformed_response(data: bytes) -> None:
    for api_key, version in ((DESCRIBE, 0), (LIST, 2), (ApiKey.API_VERSIONS, 0)):
        with contextlib.suppress(MalformedResponseError):
            decode_response(api_key, version, data)
