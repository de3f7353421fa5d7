"""Turning a plain nested dict into one version's kio dataclass (used by ``encode_response``).

Handlers write one dict per response with the field names of kio's *latest* schema (for
example ``throttle_time``; ``throttle_time_ms`` is accepted as an alias for kio's timedelta
fields) and this module maps it onto whichever version was negotiated:

- a key that this version lacks is dropped (so is a misspelt key: not yet checked against
  the union of all versions' field names);
- a missing field takes its schema default, else a zero: 0, "", b"", False, the zero UUID,
  an empty tuple for arrays, ``None`` for nullable scalars, a nested default struct;
- nested lists of dicts become tuples of the nested dataclasses; ints become
  ``timedelta``/``datetime`` for kio's ``timedelta_i32``/``datetime_i64`` fields and
  ``ErrorCode`` for error codes; ``str`` becomes ``UUID`` for uuid fields;
  ``bytes``/``memoryview`` records pass through untouched (no copy).

The per-class plan (field names, converters, defaults) is computed once and cached.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields, is_dataclass
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)
from kio.static.constants import uuid_zero
from kio.static.protocol import Entity

from riverbed.protocol.errors import LocalProtocolError

__all__ = ("shape_entity",)

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_NO_DEFAULT: Any = object()
Converter = Callable[[Any], Any]


def _timedelta(value: Any) -> Any:
    if isinstance(value, datetime.timedelta):
        return value
    return datetime.timedelta(milliseconds=value)


def _datetime(value: Any) -> Any:
    if value is None or isinstance(value, datetime.datetime):
        return value
    return _EPOCH + datetime.timedelta(milliseconds=value)


def _uuid(value: Any) -> Any:
    if value is None or isinstance(value, uuid.UUID):
        return value
    if isinstance(value, bytes):
        return uuid.UUID(bytes=value)
    return uuid.UUID(value)


def _error_code(value: Any) -> Any:
    return value if isinstance(value, ErrorCode) else ErrorCode(value)


def _identity(value: Any) -> Any:
    return value


_SCALAR_CONVERTERS: Mapping[str, Converter] = {
    "timedelta_i32": _timedelta,
    "timedelta_i64": _timedelta,
    "datetime_i64": _datetime,
    "uuid": _uuid,
    "error_code": _error_code,
}

_ZEROS: Mapping[str, Any] = {
    "string": "",
    "bytes": b"",
    "records": b"",
    "bool": False,
    "uuid": uuid_zero,
    "float64": 0.0,
    "timedelta_i32": datetime.timedelta(0),
    "timedelta_i64": datetime.timedelta(0),
    "datetime_i64": _EPOCH,
    "error_code": ErrorCode.none,
}


@dataclass(frozen=True, slots=True)
class _FieldPlan:
    name: str
    convert: Converter
    default: Any  # _NO_DEFAULT: the dataclass supplies it


def _tuple_of(item: Converter) -> Converter:
    def convert(value: Any) -> Any:
        if value is None:
            return None
        return tuple([item(v) for v in value])

    return convert


def _entity_converter(entity_type: type[Entity]) -> Converter:
    def convert(value: Any) -> Any:
        if value is None or type(value) is entity_type:
            return value
        return shape_entity(entity_type, value)

    return convert


def _plan_field(field: Any) -> _FieldPlan:
    field_class = classify_field(field)
    has_default = field.default is not MISSING or field.default_factory is not MISSING
    if isinstance(field_class, EntityField):
        entity_type = field_class.type_
        convert = _entity_converter(entity_type)
        zero: Any = None if is_optional(field) else _ZeroEntity(entity_type)
    elif isinstance(field_class, EntityTupleField):
        convert = _tuple_of(_entity_converter(field_class.type_))
        zero = ()
    else:
        kafka_type = get_schema_field_type(field)
        scalar = _SCALAR_CONVERTERS.get(kafka_type, _identity)
        if isinstance(field_class, PrimitiveTupleField):
            convert = _tuple_of(scalar)
            zero = ()
        else:
            assert isinstance(field_class, PrimitiveField)
            convert = scalar
            if kafka_type == "records":
                zero = b""
            elif is_optional(field):
                zero = None
            else:
                zero = _ZEROS.get(kafka_type, 0)
    return _FieldPlan(field.name, convert, _NO_DEFAULT if has_default else zero)


@dataclass(frozen=True, slots=True)
class _ZeroEntity:
    """Marker: build the nested entity from ``{}`` when it is needed."""

    entity_type: type[Entity]


@dataclass(frozen=True, slots=True)
class _ClassPlan:
    fields: tuple[_FieldPlan, ...]
    aliases: Mapping[str, str]  # "throttle_time_ms" -> "throttle_time"


@cache
def _class_plan(entity_type: type[Entity]) -> _ClassPlan:
    plans = tuple(_plan_field(f) for f in fields(entity_type))
    aliases = {
        f.name + "_ms": f.name
        for f in fields(entity_type)
        if f.metadata.get("kafka_type") in {"timedelta_i32", "timedelta_i64", "datetime_i64"}
    }
    return _ClassPlan(plans, aliases)


def shape_entity(entity_type: type[Entity], data: Mapping[str, Any]) -> Any:
    """Build ``entity_type`` from ``data`` (see the module docstring)."""
    if is_dataclass(data):
        if type(data) is entity_type:
            return data
        raise LocalProtocolError(
            f"got a {type(data).__qualname__} v{getattr(data, '__version__', '?')}, "
            f"need {entity_type.__qualname__} v{entity_type.__version__}"
        )
    if not isinstance(data, Mapping):
        raise LocalProtocolError(
            f"{entity_type.__qualname__} needs a mapping, got {type(data).__qualname__}"
        )
    plan = _class_plan(entity_type)
    if plan.aliases and not plan.aliases.keys().isdisjoint(data):
        data = {plan.aliases.get(k, k): v for k, v in data.items()}
    values: dict[str, Any] = {}
    for field_plan in plan.fields:
        name = field_plan.name
        if name in data:
            try:
                values[name] = field_plan.convert(data[name])
            except (TypeError, ValueError, OverflowError, AttributeError) as e:
                raise LocalProtocolError(
                    f"{entity_type.__qualname__}.{name}: cannot use {data[name]!r}: {e}"
                ) from e
        elif field_plan.default is not _NO_DEFAULT:
            default = field_plan.default
            if isinstance(default, _ZeroEntity):
                default = shape_entity(default.entity_type, {})
            values[name] = default
    return entity_type(**values)
