"""A slower entity reader that skips unknown tagged fields, as KIP-482 requires.

kio 0.6.5's native reader raises ``KeyError`` on a tag its schema does not know. Newer clients
may send tags we have never heard of, so ``decode_request`` retries with this reader, which is
built from kio's own per-field native readers and walks the tagged-field sections itself.
It runs only for requests that actually carry an unknown tag (rare), so it favours clarity.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, Field, fields
from functools import cache
from typing import Any, TypeAlias

from kio._kio_native import get_field_reader
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kio.serial.readers import (
    compact_array_reader,
    legacy_array_reader,
    read_int8,
    read_unsigned_varint,
)
from kio.static.protocol import Entity

__all__ = ("read_tagged_fields", "tolerant_entity_reader")

ReaderFn: TypeAlias = Callable[[Any, int], tuple[Any, int]]


class TaggedFieldError(ValueError):
    """A tagged field's declared size disagrees with its content."""


def _field_reader(entity_type: type[Entity], field: Field[Any], *, is_tag: bool) -> ReaderFn:
    field_class = classify_field(field)
    if isinstance(field_class, EntityTupleField):
        item = tolerant_entity_reader(field_class.type_)
        array = compact_array_reader if entity_type.__flexible__ else legacy_array_reader
        return array(item)
    if isinstance(field_class, EntityField):
        inner = tolerant_entity_reader(field_class.type_)
        if is_tag or not is_optional(field):
            return inner
        return _nullable(inner)
    reader: ReaderFn = get_field_reader(entity_type, field, False, is_tag)
    return reader


def _nullable(inner: ReaderFn) -> ReaderFn:
    # KIP-893: a nullable struct is preceded by an int8 marker, -1 for null.
    def read(buffer: Any, offset: int) -> tuple[Any, int]:
        marker, size = read_int8(buffer, offset)
        if marker < 0:
            return None, size
        value, inner_size = inner(buffer, offset + size)
        return value, size + inner_size

    return read


@cache
def tolerant_entity_reader(entity_type: type[Entity]) -> ReaderFn:
    """Read ``entity_type`` at an offset like kio's reader, ignoring unknown tags."""
    plain: list[tuple[str, ReaderFn]] = []
    tagged: dict[int, tuple[str, ReaderFn]] = {}
    tag_defaults: dict[str, Any] = {}
    for field in fields(entity_type):
        tag = get_field_tag(field)
        if tag is None:
            plain.append((field.name, _field_reader(entity_type, field, is_tag=False)))
        else:
            tagged[tag] = (field.name, _field_reader(entity_type, field, is_tag=True))
            if field.default is MISSING and field.default_factory is MISSING:
                tag_defaults[field.name] = get_tagged_field_default(field)
    flexible = entity_type.__flexible__

    def read(buffer: Any, offset: int) -> tuple[Any, int]:
        position = offset
        values: dict[str, Any] = {}
        for name, reader in plain:
            values[name], size = reader(buffer, position)
            position += size
        if flexible:
            position = read_tagged_fields(buffer, position, tagged, values)
            for name, default in tag_defaults.items():
                values.setdefault(name, default)
        return entity_type(**values), position - offset

    return read


def read_tagged_fields(
    buffer: Any, position: int, tagged: dict[int, tuple[str, ReaderFn]], values: dict[str, Any]
) -> int:
    """Read a tagged-field section at ``position`` into ``values``; return the end position.

    Tags missing from ``tagged`` are skipped.
    """
    count, size = read_unsigned_varint(buffer, position)
    position += size
    for _ in range(count):
        tag, size = read_unsigned_varint(buffer, position)
        position += size
        length, size = read_unsigned_varint(buffer, position)
        position += size
        end = position + length
        if end > len(buffer):
            raise TaggedFieldError(f"tagged field {tag} runs past the end of the frame")
        known = tagged.get(tag)
        if known is not None:
            name, reader = known
            values[name], used = reader(buffer, position)
            if used != length:
                raise TaggedFieldError(f"tagged field {tag} declared {length} bytes, used {used}")
        position = end
    return position
