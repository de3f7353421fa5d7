"""Request frames to typed requests, and responses to frames (sans-IO, built on kio 0.6.5).

``decode_request`` runs once per request frame and ``encode_response`` once per response, on
the broker's event loop: both are hot paths. Records bytes are copied once on decode (kio's
native reader makes ``bytes`` of the records field) and once on encode (the final join; use
``encode_response_parts`` with ``transport.writelines`` to skip even that).
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeAlias

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from riverbed.protocol._shape import shape_entity
from riverbed.protocol._tolerant import read_tagged_fields, tolerant_entity_reader
from riverbed.protocol.errors import (
    LocalProtocolError,
    RemoteProtocolError,
    UnsupportedVersionError,
)
from riverbed.protocol.produce_response import encode_produce_response_body
from riverbed.protocol.versions import SUPPORTED_APIS, ApiKey, advertised_apis

__all__ = (
    "ErrorCode",
    "Request",
    "decode_request",
    "encode_response",
    "encode_response_parts",
    "encode_unsupported_version",
)

Buffer: TypeAlias = bytes | bytearray | memoryview
_READ_FAILURES = (
    Exception  # kio raises KeyError, ValueError, TypeError, DecodeError, UnicodeDecodeError...
)
_FIXED_HEADER = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """One decoded request: its header fields and its kio body dataclass."""

    api_key: ApiKey
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any  # the kio request dataclass of (api_key, api_version)


@cache
def _request_reader(api_key: ApiKey, api_version: int) -> tuple[bool, Callable[..., Any]]:
    schema = load_request_schema(api_key, api_version)
    return schema.__flexible__, entity_reader(schema)


def decode_request(frame: Buffer) -> Request:
    """Decode one frame (without its size prefix) into a ``Request``.

    Raises ``UnsupportedVersionError`` for an API key or version outside ``SUPPORTED_APIS``'s
    implemented range (the body is not parsed then), ``RemoteProtocolError`` for anything
    malformed or truncated, and never any other exception. Trailing bytes after the
    body are ignored, as Apache Kafka does.
    Unknown tagged fields are ignored.
    """
    if type(frame) is not bytes:
        # kio's native reader refuses writable buffers; a read-only view costs no copy.
        frame = memoryview(frame).toreadonly()
    length = len(frame)
    if length < _FIXED_HEADER.size:
        raise RemoteProtocolError(f"request header truncated ({length} bytes)")
    raw_key, api_version, correlation_id, client_id_length = _FIXED_HEADER.unpack_from(frame)
    try:
        api_key = ApiKey(raw_key)
    except ValueError:
        raise UnsupportedVersionError(
            api_key=raw_key, api_version=api_version, correlation_id=correlation_id
        ) from None
    versions = SUPPORTED_APIS.get(api_key)
    if versions is None or not versions.implements(api_version):
        raise UnsupportedVersionError(
            api_key=api_key, api_version=api_version, correlation_id=correlation_id
        )
    offset = _FIXED_HEADER.size
    # RequestHeader.client_id is always a legacy (int16-length) nullable string, even in the
    # flexible header v2 (RequestHeader.json, "flexibleVersions": "none" for this field).
    client_id: str | None = None
    if client_id_length >= 0:
        end = offset + client_id_length
        if end > length:
            raise RemoteProtocolError("client_id runs past the end of the frame")
        try:
            client_id = str(frame[offset:end], "utf-8")
        except UnicodeDecodeError as e:
            raise RemoteProtocolError("client_id is not UTF-8") from e
        offset = end
    elif client_id_length != -1:
        raise RemoteProtocolError(f"negative client_id length {client_id_length}")
    flexible, reader = _request_reader(api_key, api_version)
    try:
        if flexible:
            offset = read_tagged_fields(frame, offset, {}, {})  # header v2 has no known tags
        try:
            body, _ = reader(frame, offset)
        except KeyError:
            # kio's native reader rejects unknown tagged fields; KIP-482 says skip them.
            schema = load_request_schema(api_key, api_version)
            body, _ = tolerant_entity_reader(schema)(frame, offset)
    except RemoteProtocolError:
        raise
    except _READ_FAILURES as e:
        raise RemoteProtocolError(
            f"malformed {api_key.name} v{api_version} request: {type(e).__name__}: {e}"
        ) from e
    # Bytes after the body are ignored, as Apache Kafka ignores them: librdkafka 2.16's
    # Metadata v12 request carries 3 (a v8-10 field and a tag section) and Kafka serves it.
    return Request(
        api_key=api_key,
        api_version=api_version,
        correlation_id=correlation_id,
        client_id=client_id,
        body=body,
    )


class _Chunks(list[Any]):
    """A kio ``Writable`` that keeps references to what is written instead of copying it."""

    write = list.append


@cache
def _response_plan(
    api_key: ApiKey, api_version: int
) -> tuple[type[Any], Callable[..., None], bool]:
    schema = load_response_schema(api_key, api_version)
    # ApiVersions responses always use header v0 (KIP-511); kio encodes that in the schema.
    header_v1 = schema.__header_schema__.__version__ == 1
    return schema, entity_writer(schema), header_v1


def encode_response_parts(request: Request, body: Mapping[str, Any] | Any) -> list[Any]:
    """Like ``encode_response``, as a list of buffers for ``writelines`` (records not copied)."""
    schema, writer, header_v1 = _response_plan(request.api_key, request.api_version)
    chunks = _Chunks()
    fast = None
    if request.api_key == ApiKey.PRODUCE and isinstance(body, Mapping):
        fast = encode_produce_response_body(request.api_version, body)
    if fast is not None:
        chunks.append(fast)
    else:
        _write_with_kio(request, schema, writer, body, chunks)
    header = _CORRELATION.pack(request.correlation_id)
    if header_v1:
        header += b"\x00"  # no tagged fields
    size = len(header) + sum(map(len, chunks))
    chunks[0:0] = (_SIZE.pack(size), header)
    return chunks


def _write_with_kio(
    request: Request, schema: type[Any], writer: Callable[..., None], body: Any, out: _Chunks
) -> None:
    entity = shape_entity(schema, body)
    try:
        writer(out, entity)
    except LocalProtocolError:
        raise
    except Exception as e:  # kio raises struct.error, OutOfBoundValue, TypeError, ...
        raise LocalProtocolError(
            f"cannot encode {request.api_key.name} v{request.api_version} response: {e}"
        ) from e


def encode_response(request: Request, body: Mapping[str, Any] | Any) -> bytes:
    """The whole response frame (size prefix, response header, body) for ``request``.

    ``body`` is the kio response dataclass of the request's version, or a plain nested dict
    with the latest version's field names (see ``riverbed.protocol._shape``).
    """
    return b"".join(encode_response_parts(request, body))


def encode_unsupported_version(
    api_key: int, correlation_id: int, *, served: frozenset[ApiKey] | None = None
) -> bytes:
    """The KIP-511 answer to an ApiVersions request of a version we do not implement.

    An ApiVersions v0 response (header v0) with ``UNSUPPORTED_VERSION`` and our ranges, so the
    client retries with a version we have. ``served`` defaults to every API in the table.
    Other APIs get no answer: the broker closes the connection, as Apache Kafka does.
    """
    if api_key != ApiKey.API_VERSIONS:
        raise LocalProtocolError("only ApiVersions is answered with UNSUPPORTED_VERSION")
    request = Request(
        api_key=ApiKey.API_VERSIONS,
        api_version=0,
        correlation_id=correlation_id,
        client_id=None,
        body=None,
    )
    return encode_response(
        request, api_versions_body(served=served, error_code=ErrorCode.unsupported_version)
    )


def milliseconds(value: Any) -> int:
    """A request's ``timedelta_i32`` field (kio gives a ``timedelta``) in milliseconds;
    plain numbers (-1 meaning "none") pass through."""
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


def api_versions_body(
    *, served: frozenset[ApiKey] | None = None, error_code: ErrorCode = ErrorCode.none
) -> dict[str, Any]:
    """The ApiVersions response body (for ``encode_response``) advertising ``served`` APIs."""
    keys = SUPPORTED_APIS.keys() if served is None else served
    return {
        "error_code": error_code,
        "api_keys": [
            {"api_key": a.api_key, "min_version": a.min_version, "max_version": a.max_version}
            for a in advertised_apis(keys)
        ],
        "throttle_time": 0,
    }
