"""The Python-side parse of JSON events (``json_arrow``): pyarrow's many-at-once path gives
exactly what the one-by-one path gives, whatever the values, in their order (that
``from_json`` agrees with the one-by-one path is checked in a Spark session in
``tests/spark/test_json_events.py``)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.pipelines.operators.json_arrow import arrow_schema, parse_json_objects, parse_one

FIELDS = [("event_id", "string"), ("page", "string"), ("ts", "long")]
SCHEMA = arrow_schema(FIELDS)

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=False),
    st.text(max_size=8),
)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)
_events = st.dictionaries(
    st.sampled_from(["event_id", "page", "ts", "user_id", "x"]), _json, max_size=5
).map(lambda event: json.dumps(event).encode())
_valid = st.builds(
    lambda i, page, ts: json.dumps({"event_id": f"e{i}", "page": page, "ts": ts}).encode(),
    st.integers(0, 10**6),
    st.text(max_size=12),
    st.integers(0, 2**62),
)
_junk = st.one_of(
    st.binary(max_size=24),
    st.sampled_from([b"null", b"[]", b"{}", b"", b"{ }", b'{"ts":1}{"ts":2}', b'{"ts": 1}\n']),
    st.builds(lambda b: b"{" + b + b"}", st.binary(max_size=16)),
)
_values = st.lists(st.one_of(_valid, _valid, _events, _junk, st.none()), max_size=40)


@settings(max_examples=300, deadline=None)
@given(_values)
def test_many_at_once_gives_what_one_by_one_gives(values: list[bytes | None]) -> None:
    table = parse_json_objects(pa.array(values, pa.binary()), SCHEMA)
    assert table.schema == SCHEMA
    assert table.to_pylist() == [parse_one(value, FIELDS) for value in values]


def test_valid_events_take_the_fast_path_and_keep_their_order() -> None:
    values = [json.dumps({"event_id": f"e{i}", "page": "/p", "ts": i}).encode() for i in range(500)]
    values[250] = b"not json"
    table = parse_json_objects(pa.array(values, pa.binary()), SCHEMA)
    assert table["ts"].to_pylist() == [*range(250), None, *range(251, 500)]
    assert table["event_id"][499].as_py() == "e499"


def test_rules_of_from_json() -> None:
    assert parse_one(b'{"page": 5, "ts": "12", "event_id": {"a": [1, 2.5]}}', FIELDS) == {
        "event_id": '{"a":[1,2.5]}', "page": "5", "ts": None,
    }  # fmt: skip
    assert parse_one(b' {"ts": 3} trailing', FIELDS)["ts"] == 3
    assert parse_one(b'{"page": "\xff", "ts": 1e3}', FIELDS) == {
        "event_id": None, "page": "\ufffd", "ts": None,
    }  # fmt: skip
    assert parse_one(b'{"page": 1e20, "ts": 9223372036854775808}', FIELDS)["page"] == "1.0E20"
    assert parse_one(b"[1]", FIELDS) == dict.fromkeys(["event_id", "page", "ts"])


def test_unsupported_types_are_refused() -> None:
    with pytest.raises(ValueError, match="only string and long"):
        arrow_schema([("amount", "double")])
    with pytest.raises(ValueError, match="unsupported field type"):
        parse_json_objects(pa.array([b"{}"]), pa.schema([("x", pa.float64())]))
