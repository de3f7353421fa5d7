"""The Produce response written directly, without kio: the answer the broker sends most.

kio's generic writer walks the schema for every field, which costs about 24 µs for a
one-partition answer; this writes the same bytes in a few µs. It covers what the broker
answers — versions 3 to 11, no per-record errors (Produce never reports them), no leader
hints (the tagged fields of v10+ stay empty) — and returns None otherwise, so the caller
falls back to kio. The tests compare it with kio byte for byte for every version.

Layout (Kafka's ProduceResponse.json): responses [name, partition_responses [index int16
error_code, int64 base_offset, int64 log_append_time_ms, int64 log_start_offset (v5+),
record_errors [] (v8+), nullable string error_message (v8+)]], int32 throttle_time_ms.
From v9 the message is flexible: compact arrays and strings (unsigned varint of length + 1)
and an empty tagged-field section after every struct.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

__all__ = ["encode_produce_response_body"]

FIRST_VERSION, LAST_VERSION = 3, 11
_PARTITION_V5 = struct.Struct(">ihqqq")  # index, error_code, base_offset, append time, start
_PARTITION_V3 = struct.Struct(">ihqq")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_NO_TAGS = b"\x00"


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length(count: int, flexible: bool) -> bytes:
    return _uvarint(count + 1) if flexible else _INT32.pack(count)


def _string(text: str | None, flexible: bool) -> bytes:
    if text is None:
        return b"\x00" if flexible else _INT16.pack(-1)
    data = text.encode()
    return (_uvarint(len(data) + 1) if flexible else _INT16.pack(len(data))) + data


def _millis(value: Any) -> int:
    """A time field as the broker gives it: epoch ms, or -1 (also as None)."""
    return -1 if value is None else int(value)


def encode_produce_response_body(version: int, body: Mapping[str, Any]) -> bytes | None:
    """The body of a Produce response of ``version`` for the plain-dict ``body``, or None
    where this writer does not apply (the caller then uses kio)."""
    if not FIRST_VERSION <= version <= LAST_VERSION:
        return None
    try:
        return _encode(version, body)
    except (KeyError, TypeError, struct.error):
        return None  # kio says what is wrong with it


def _encode(version: int, body: Mapping[str, Any]) -> bytes | None:
    flexible = version >= 9
    partition_struct = _PARTITION_V5 if version >= 5 else _PARTITION_V3
    responses = body.get("responses", ())
    out = bytearray(_length(len(responses), flexible))
    for topic in responses:
        out += _string(topic["name"], flexible)
        partitions = topic.get("partition_responses", ())
        out += _length(len(partitions), flexible)
        for p in partitions:
            if p.get("record_errors") or p.get("current_leader") is not None:
                return None
            fields = [
                p["index"],
                int(p.get("error_code", 0)),
                p["base_offset"],
                _millis(p.get("log_append_time")),
            ]
            if version >= 5:
                fields.append(p.get("log_start_offset", -1))
            out += partition_struct.pack(*fields)
            if version >= 8:
                out += _length(0, flexible)  # record_errors
                out += _string(p.get("error_message"), flexible)
            if flexible:
                out += _NO_TAGS
        if flexible:
            out += _NO_TAGS
    out += _INT32.pack(int(body.get("throttle_time", 0)))
    if flexible:
        out += _NO_TAGS  # no node_endpoints
    return bytes(out)
