"""Requests to frames, response frames to kio values: the client side of the Kafka wire (sans-IO).

``codec`` is the broker's side (request frames in, responses out); this module is the other
direction, for ``riverbed.client`` (which does the socket work) and the broker's wire-level
tests. Both use kio's schemas. Bytes in, values out; values in, bytes out; no I/O.

A frame is ``int32 size`` + ``size`` bytes. The headers are kio's schemas, chosen by the
body's schema as Kafka's message definitions say:

- request header v1 (api key, version, correlation id, client id), v2 for flexible requests
  (adds a tagged-field section; the client id stays an int16-length string);
- response header v0 (correlation id), v1 for flexible responses (adds a tagged-field
  section) except ApiVersions, whose responses always use v0 (KIP-511).

kio refuses a negative ``datetime_i64`` ("Cannot parse negative timestamp"), but Kafka sends
-1 to mean "none": DescribeTransactions' ``transaction_start_time`` of an id with no open
transaction is -1. Responses are read with every such field made nullable, as kio's schemas
already are where Kafka's definitions say so (Produce's ``log_append_time``), so -1 reads as
``None``. Everything else about the schemas is kio's.
"""

from __future__ import annotations

import dataclasses
import io
import types
from collections.abc import Callable
from functools import cache
from typing import Any, get_args, get_origin

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from riverbed.protocol.errors import MalformedResponseError

__all__ = ("decode_response", "encode_request", "request_body")

_SCHEMA_ATTRIBUTES = ("__type__", "__version__", "__flexible__", "__api_key__",
                      "__header_schema__")  # fmt: skip


def request_body(api_key: int, version: int, **fields: Any) -> Any:
    """The kio request dataclass of ``api_key`` at ``version``, from the fields it has.

    Fields the version does not have are dropped, so one call builds every version of a
    request (Metadata v1 has no ``allow_auto_topic_creation``, v4 and later do).
    """
    schema = load_request_schema(api_key, version)
    known = {field.name for field in dataclasses.fields(schema)}
    return schema(**{name: value for name, value in fields.items() if name in known})


def encode_request(
    api_key: int, version: int, correlation_id: int, body: Any, *, client_id: str | None
) -> bytes:
    """One whole request frame: size prefix, request header (v1 or v2), ``body``."""
    header_schema = type(body).__header_schema__
    header = header_schema(
        request_api_key=api_key,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    out = io.BytesIO()
    out.write(b"\x00\x00\x00\x00")  # the size, filled in below
    entity_writer(header_schema)(out, header)
    entity_writer(type(body))(out, body)
    frame = out.getbuffer()
    frame[:4] = (len(frame) - 4).to_bytes(4, "big", signed=True)
    return bytes(frame)


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, body) of one response frame without its size prefix.

    Raises ``MalformedResponseError`` if the frame is not a response of ``api_key`` at
    ``version``, and never any other exception.
    """
    schema: Any = _response_schema(api_key, version)
    try:
        header, header_size = _reader(schema.__header_schema__)(frame, 0)
        body, _ = _reader(schema)(frame, header_size)
    except Exception as e:  # kio raises ValueError, KeyError, UnicodeDecodeError, ...
        raise MalformedResponseError(
            f"cannot read the answer to request {api_key} v{version}: {type(e).__name__}: {e}"
        ) from e
    return header.correlation_id, body


@cache
def _reader(schema: Any) -> Callable[[bytes, int], tuple[Any, int]]:
    reader: Callable[[bytes, int], tuple[Any, int]] = entity_reader(schema)
    return reader


@cache
def _response_schema(api_key: int, version: int) -> type[Any]:
    """kio's response schema, with non-nullable timestamps made nullable (see above)."""
    schema: type[Any] = _nullable_timestamps(load_response_schema(api_key, version))
    return schema


@cache
def _nullable_timestamps(schema: Any) -> Any:
    """``schema`` itself, or a copy whose ``datetime_i64`` fields (also in nested entities)
    accept None, which kio writes and reads as -1."""
    rebuilt: list[tuple[str, Any, Any]] = []
    changed = False
    for field in dataclasses.fields(schema):
        annotation: Any = field.type
        if field.metadata.get("kafka_type") == "datetime_i64" and not _nullable(annotation):
            annotation = annotation | None
        elif get_origin(annotation) is tuple and _is_entity(get_args(annotation)[0]):
            annotation = tuple[_nullable_timestamps(get_args(annotation)[0]), ...]  # type: ignore[misc]
        elif _is_entity(annotation):
            annotation = _nullable_timestamps(annotation)
        changed |= annotation != field.type
        rebuilt.append((field.name, annotation, _copy_field(field)))
    if not changed:
        return schema
    namespace = {name: getattr(schema, name) for name in _SCHEMA_ATTRIBUTES}
    return dataclasses.make_dataclass(
        schema.__name__, rebuilt, namespace=namespace, frozen=True, slots=True, kw_only=True
    )


def _is_entity(annotation: Any) -> bool:
    return isinstance(annotation, type) and dataclasses.is_dataclass(annotation)


def _nullable(annotation: Any) -> bool:
    return isinstance(annotation, types.UnionType) and types.NoneType in get_args(annotation)


def _copy_field(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return dataclasses.field(metadata=field.metadata, default=field.default)
    if field.default_factory is not dataclasses.MISSING:
        return dataclasses.field(metadata=field.metadata, default_factory=field.default_factory)
    return dataclasses.field(metadata=field.metadata)
