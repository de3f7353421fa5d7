"""The direct Produce response writer against kio's, byte for byte, for every version."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.protocol import ApiKey, ErrorCode, Request, codec
from riverbed.protocol.produce_response import encode_produce_response_body

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
TIMES = st.one_of(st.just(-1), st.integers(0, 253_402_300_799_999))  # datetime: up to 9999

partitions = st.fixed_dictionaries(
    {
        "index": INT32,
        "error_code": st.sampled_from(list(ErrorCode)),
        "base_offset": INT64,
        "log_append_time": TIMES,
        "log_start_offset": INT64,
        "record_errors": st.just([]),
        "error_message": st.one_of(st.none(), st.text(max_size=40)),
    }
)
topics = st.fixed_dictionaries(
    {"name": st.text(min_size=1, max_size=30), "partition_responses": st.lists(partitions)}
)
bodies = st.fixed_dictionaries(
    {"responses": st.lists(topics, max_size=4), "throttle_time": st.integers(0, 2**31 - 1)}
)


def kio_body(version: int, body: dict[str, Any]) -> bytes:
    schema, writer, _ = codec._response_plan(ApiKey.PRODUCE, version)
    request = Request(
        api_key=ApiKey.PRODUCE, api_version=version, correlation_id=7, client_id=None, body=None
    )
    out = codec._Chunks()
    codec._write_with_kio(request, schema, writer, body, out)
    return b"".join(bytes(chunk) for chunk in out)


@settings(max_examples=300, deadline=None)
@given(version=st.integers(3, 11), body=bodies)
def test_the_direct_writer_writes_what_kio_writes(version: int, body: dict[str, Any]) -> None:
    assert encode_produce_response_body(version, body) == kio_body(version, body)


def test_whole_frames_are_the_same_and_other_shapes_fall_back_to_kio() -> None:
    body = {
        "responses": [
            {
                "name": "t",
                "partition_responses": [
                    {
                        "index": 0,
                        "error_code": ErrorCode.none,
                        "base_offset": 42,
                        "log_append_time": -1,
                        "log_start_offset": 0,
                        "record_errors": [],
                        "error_message": None,
                    }
                ],
            }
        ],
        "throttle_time": 0,
    }
    for version in range(3, 12):
        request = Request(
            api_key=ApiKey.PRODUCE, api_version=version, correlation_id=9, client_id=None,
            body=None,
        )  # fmt: skip
        frame = codec.encode_response(request, body)
        assert frame.endswith(kio_body(version, body))
    with_errors = {"responses": [{"name": "t", "partition_responses": [
        {**body["responses"][0]["partition_responses"][0],  # type: ignore[index]
         "record_errors": [{"batch_index": 0, "batch_index_error_message": "bad"}]}
    ]}], "throttle_time": 0}  # fmt: skip
    assert encode_produce_response_body(9, with_errors) is None
    assert encode_produce_response_body(12, body) is None
