"""FrameReader: whole, byte at a time, many frames per chunk, hostile size prefixes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.protocol import FrameReader, FrameTooLargeError, RemoteProtocolError


def _framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _drain(reader: FrameReader) -> list[bytes]:
    frames = []
    while (frame := reader.next_frame()) is not None:
        frames.append(frame)
    return frames


@given(st.lists(st.binary(max_size=300), max_size=8), st.integers(min_value=1, max_value=50))
@settings(max_examples=300)
def test_any_chunking_yields_the_same_frames(bodies: list[bytes], chunk_size: int) -> None:
    stream = b"".join(_framed(b) for b in bodies)
    reader = FrameReader(max_frame_bytes=1000)
    frames: list[bytes] = []
    for i in range(0, len(stream), chunk_size):
        reader.receive_data(stream[i : i + chunk_size])
        frames.extend(_drain(reader))
    assert frames == bodies
    assert reader.pending_bytes == 0


def test_byte_at_a_time_with_bytearray_and_memoryview() -> None:
    stream = _framed(b"hello") + _framed(b"") + _framed(b"world")
    reader = FrameReader(max_frame_bytes=10)
    frames: list[bytes] = []
    for i in range(len(stream)):
        data = bytearray(stream[i : i + 1]) if i % 2 else memoryview(stream)[i : i + 1]
        reader.receive_data(data)
        frames.extend(_drain(reader))
    assert frames == [b"hello", b"", b"world"]


def test_partial_frame_is_pending_and_not_returned() -> None:
    reader = FrameReader(max_frame_bytes=100)
    reader.receive_data(_framed(b"abcdef")[:7])
    assert reader.next_frame() is None
    assert reader.pending_bytes == 7


def test_frame_in_one_chunk_is_not_copied() -> None:
    body = b"x" * 1000
    reader = FrameReader(max_frame_bytes=2000)
    reader.receive_data(struct.pack(">i", len(body)))
    reader.receive_data(body)
    assert reader.next_frame() is body


def test_oversized_frame_rejected_before_body_arrives() -> None:
    reader = FrameReader(max_frame_bytes=1024)
    reader.receive_data(struct.pack(">i", 2**31 - 1))
    with pytest.raises(FrameTooLargeError) as info:
        reader.next_frame()
    assert info.value.size == 2**31 - 1
    with pytest.raises(FrameTooLargeError):  # the reader stays broken
        reader.next_frame()


def test_negative_size_is_remote_error() -> None:
    reader = FrameReader(max_frame_bytes=1024)
    reader.receive_data(struct.pack(">i", -1))
    with pytest.raises(RemoteProtocolError):
        reader.next_frame()


def test_limit_is_inclusive() -> None:
    reader = FrameReader(max_frame_bytes=4)
    reader.receive_data(_framed(b"abcd"))
    assert reader.next_frame() == b"abcd"


def test_megabyte_frame_in_64k_chunks_is_linear() -> None:
    body = bytes(range(256)) * 4096  # 1 MiB
    stream = _framed(body) * 3
    reader = FrameReader(max_frame_bytes=2 << 20)
    frames: list[bytes] = []
    for i in range(0, len(stream), 65536):
        reader.receive_data(stream[i : i + 65536])
        frames.extend(_drain(reader))
    assert frames == [body] * 3
