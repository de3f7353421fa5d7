"""Splitting a byte stream into Kafka request frames (``int32 size`` + ``size`` bytes)."""

from __future__ import annotations

import struct
from collections import deque

from riverbed.protocol.errors import FrameTooLargeError, RemoteProtocolError

__all__ = ("DEFAULT_MAX_FRAME_BYTES", "FrameReader")

# Kafka's default socket.request.max.bytes (100 MiB).
DEFAULT_MAX_FRAME_BYTES = 104_857_600

_SIZE = struct.Struct(">i")


class FrameReader:
    """Buffers received bytes and hands out whole frames, h11 style (no I/O).

    Call ``receive_data`` with whatever the socket produced, then ``next_frame`` until it
    returns ``None`` (more data needed). Received chunks are kept by reference and joined
    once per frame, so a 1 MB frame arriving in 64 KB chunks is copied exactly once; a frame
    that is exactly one received ``bytes`` chunk is returned without copying.

    The size prefix is checked before any of the body is waited for: a negative size raises
    ``RemoteProtocolError`` and one above ``max_frame_bytes`` raises ``FrameTooLargeError``.
    Nothing is ever allocated by the announced size. After an error the reader is broken
    and raises the same error again: the connection must be closed.
    """

    __slots__ = ("_chunks", "_error", "_expected", "_first_offset", "_max_frame_bytes", "_pending")

    def __init__(self, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must be >= 0")
        self._max_frame_bytes = max_frame_bytes
        self._chunks: deque[bytes] = deque()
        self._first_offset = 0  # bytes of _chunks[0] already handed out
        self._pending = 0  # bytes buffered and not yet handed out
        self._expected: int | None = None  # body size of the frame being assembled
        self._error: RemoteProtocolError | None = None

    @property
    def pending_bytes(self) -> int:
        """Bytes received but not yet returned; non-zero at EOF means a truncated frame."""
        return self._pending + (4 if self._expected is not None else 0)

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        # Mutable buffers may be reused by the caller, so they are copied; bytes are kept.
        chunk = data if type(data) is bytes else bytes(data)
        self._chunks.append(chunk)
        self._pending += len(chunk)

    def next_frame(self) -> bytes | None:
        """One whole frame without its 4-byte size prefix, or ``None`` if more data is needed."""
        if self._error is not None:
            raise self._error
        if self._expected is None:
            if self._pending < 4:
                return None
            (size,) = _SIZE.unpack(self._take(4))
            if size < 0:
                self._error = RemoteProtocolError(f"negative frame size {size}")
                raise self._error
            if size > self._max_frame_bytes:
                self._error = FrameTooLargeError(size=size, max_frame_bytes=self._max_frame_bytes)
                raise self._error
            self._expected = size
        if self._pending < self._expected:
            return None
        frame = self._take(self._expected)
        self._expected = None
        return frame

    def _take(self, n: int) -> bytes:
        """Remove and return the next ``n`` buffered bytes (caller checked ``n <= _pending``)."""
        if n == 0:
            return b""
        self._pending -= n
        first = self._chunks[0]
        start = self._first_offset
        available = len(first) - start
        if n < available:
            self._first_offset = start + n
            return first[start : start + n]
        if n == available:
            self._chunks.popleft()
            self._first_offset = 0
            return first if start == 0 else first[start:]
        # The frame spans chunks: one join, one copy.
        parts: list[bytes | memoryview] = [memoryview(first)[start:]]
        self._chunks.popleft()
        self._first_offset = 0
        needed = n - available
        while needed:
            chunk = self._chunks[0]
            if len(chunk) <= needed:
                parts.append(chunk)
                self._chunks.popleft()
                needed -= len(chunk)
            else:
                parts.append(memoryview(chunk)[:needed])
                self._first_offset = needed
                needed = 0
        return b"".join(parts)
