"""The record-batch codecs, as Kafka clients frame them on the wire.

- gzip: a plain gzip stream (``GZIPOutputStream``);
- snappy: the Java client writes xerial's ``SnappyOutputStream`` framing (an 16-byte header
  ``\\x82SNAPPY\\x00`` + version 1 + compatible version 1, then blocks of ``int32 length`` +
  raw snappy). librdkafka reads that framing too but some clients send raw snappy, so both
  are read; xerial is written;
- lz4: the LZ4 *frame* format (KIP-57: magic v2 batches use correct frame checksums);
- zstd: a zstd frame.

All codecs are cramjam's. Used only where records must be looked at (timestamp lookups,
tests, control batches), never on the produce path.
"""

from __future__ import annotations

import struct

import cramjam

from riverbed.log.batch import Compression
from riverbed.log.errors import CorruptRecordError

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_BYTES = 32 * 1024
"""Block size of xerial's SnappyOutputStream (DEFAULT_BLOCK_SIZE = 32 KiB)."""
_INT32 = struct.Struct(">i")


def compress(data: bytes, compression: Compression) -> bytes:
    """``data`` compressed and framed as a Kafka client would send it."""
    if compression is Compression.NONE:
        return data
    if compression is Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if compression is Compression.SNAPPY:
        return _xerial_compress(data)
    if compression is Compression.LZ4:
        return bytes(cramjam.lz4.compress(data))
    return bytes(cramjam.zstd.compress(data))


def decompress(data: bytes | memoryview, compression: Compression) -> bytes:
    """Inverse of :func:`compress`; CorruptRecordError if the payload does not decode."""
    if compression is Compression.NONE:
        return bytes(data)
    try:
        if compression is Compression.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if compression is Compression.SNAPPY:
            if bytes(data[: len(XERIAL_MAGIC)]) == XERIAL_MAGIC:
                return _xerial_decompress(bytes(data))
            return bytes(cramjam.snappy.decompress_raw(data))
        if compression is Compression.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"cannot decompress {compression.name} records: {exc}") from exc


def _xerial_compress(data: bytes) -> bytes:
    parts = [_XERIAL_HEADER]
    view = memoryview(data)
    for start in range(0, len(data), XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_BYTES]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _xerial_decompress(data: bytes) -> bytes:
    pos = len(_XERIAL_HEADER)
    if len(data) < pos:
        raise CorruptRecordError("truncated xerial snappy header")
    out = []
    while pos < len(data):
        if len(data) - pos < 4:
            raise CorruptRecordError("truncated xerial snappy block length")
        (length,) = _INT32.unpack_from(data, pos)
        pos += 4
        if length < 0 or pos + length > len(data):
            raise CorruptRecordError("xerial snappy block runs past the end")
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + length])))
        pos += length
    return b"".join(out)
