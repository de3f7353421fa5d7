"""Shared helpers for the protocol tests."""

from __future__ import annotations

import datetime
import enum
import uuid
from dataclasses import fields, is_dataclass
from typing import Any

import pytest
from hypothesis import strategies as st
from kio.static.constants import uuid_zero
from kio.static.primitive import Records

# kio registers strategies for its integer/timedelta types but not for Records.
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))


def plain(value: Any) -> Any:
    """A kio value as plain Python: dataclasses to dicts, timedeltas to ms, enums to int."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, enum.IntEnum):
        return int(value)
    if isinstance(value, uuid.UUID) and value == uuid_zero:
        return None
    if isinstance(value, memoryview):
        return bytes(value)
    return value


def _assert_same(kio_value: Any, other: dict[str, Any] | Any) -> None:
    """Every field of a kio value equals the same field of a kafka-python ``to_dict()``."""
    _compare(plain(kio_value), other, "$")


@pytest.fixture
def assert_same() -> Any:
    return _assert_same


def _kafka_python_name(name: str, actual: dict[str, Any]) -> str:
    # kio drops "_ms" from timedelta fields and prefixes some names (topic_authorized_operations
    # for Kafka's AuthorizedOperations inside a topic).
    for candidate in (name, name + "_ms", name.split("_", 1)[-1]):
        if candidate in actual:
            return candidate
    return name


# kafka-python reports "authorized operations omitted" and absent tagged structs as None.
_KAFKA_PYTHON_NONE = -(2**31)


def _compare(expected: Any, actual: Any, path: str) -> None:
    if actual is None and (expected == _KAFKA_PYTHON_NONE or isinstance(expected, dict)):
        return
    if expected is None and actual == -1:  # kio's nullable datetime_i64 is -1 on the wire
        return
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: {actual!r} is not a struct"
        for name, value in expected.items():
            key = _kafka_python_name(name, actual)
            assert key in actual, f"{path}.{name} missing from {sorted(actual)}"
            _compare(value, actual[key], f"{path}.{name}")
    elif isinstance(expected, list):
        assert actual is not None and len(actual) == len(expected), f"{path}: {actual!r}"
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            _compare(e, a, f"{path}[{i}]")
    else:
        if isinstance(actual, uuid.UUID) and actual == uuid_zero:
            actual = None
        if isinstance(actual, bytearray | memoryview):
            actual = bytes(actual)
        assert expected == actual, f"{path}: {expected!r} != {actual!r}"
