"""The JSON the operators keep their states in: written with orjson (``state_text``) and read
back (``loads``) to the same value, including what orjson alone would refuse."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from riverbed.pipelines.operators import json_rows
from riverbed.pipelines.operators.json_rows import (
    JSON_WROTE,
    dumps,
    json_text,
    loads,
    nonfinite_read,
    read_state,
    state_text,
)

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(JSON_VALUES)
def test_a_state_reads_back_as_written_and_as_json_reads_it(value: Any) -> None:
    text = state_text(value)
    assert loads(text) == value
    assert json.loads(text) == value  # plain JSON, whoever reads it


@given(st.text() | st.sampled_from(["c-1", 'a"b', "a\\b", "a\x7fb", "a\nb", "a\x00", "é", ""]))
def test_a_string_is_written_as_json_writes_it(value: str) -> None:
    assert dumps(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def test_compact_non_ascii_as_it_is_and_keys_in_their_order() -> None:
    value = {"b": "é€", "a": [1, 2.5, None, True]}
    assert state_text(value) == dumps(value) == '{"b":"é€","a":[1,2.5,null,true]}'


def test_what_orjson_refuses_is_written_and_read_by_json() -> None:
    huge = {"n": 2**70}  # beyond 64 bits: orjson cannot write it
    assert loads(state_text(huge)) == huge
    written_by_json = json.dumps({"x": float("nan"), "y": float("inf")})  # NaN, Infinity
    read = loads(written_by_json)
    assert math.isnan(read["x"]) and read["y"] == math.inf
    assert loads(b'{"a": 1}') == {"a": 1}


ANY_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()  # beyond 64 bits too
    | st.floats()  # NaN and infinities too
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(ANY_JSON)
def test_dumps_and_json_text_write_what_json_writes(value: Any) -> None:
    """A key's name in a checkpoint must not change with the library that writes it."""
    assert dumps(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    assert json_text(value) == json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )


@given(ANY_JSON)
def test_loads_reads_what_json_reads(value: Any) -> None:
    text = json.dumps(value)
    read = loads(text)
    assert json.dumps(read) == text  # NaN != NaN: compare the texts
    assert json.dumps(loads(text.encode())) == text


@given(ANY_JSON)
def test_a_state_with_anything_in_it_reads_back(value: Any) -> None:
    text = state_text(value)
    assert json.dumps(read_state(text)) == json.dumps(value)
    assert json.dumps(read_state(text.encode())) == json.dumps(value)
    assert json.dumps(loads(text)) == json.dumps(value)


def test_integers_beyond_64_bits_and_not_finite_floats_keep_their_value() -> None:
    text = '{"big": 123456789012345678901234567890, "low": -9223372036854775809, "n": 1}'
    assert loads(text) == {"big": 123456789012345678901234567890, "low": -(2**63) - 1, "n": 1}
    assert math.isnan(read_state(state_text({"x": float("nan")}))["x"])  # not null
    assert read_state(state_text([float("inf"), None])) == [math.inf, None]
    assert read_state(state_text({"big": -(2**63) - 1})) == {"big": -(2**63) - 1}
    assert read_state('{"x": NaN}')["x"] != read_state('{"x": NaN}')["x"]  # json wrote it
    assert json_text({"b": 1e16, "a": 2**70}) == '{"a":1180591620717411303424,"b":1e+16}'


def test_orjson_writes_a_state_with_nulls_and_json_what_would_not_read_back() -> None:
    """A ``null`` in orjson's text is ``None`` or a NaN it could not write: the text is read
    back to tell. A tuple reads back as a list, so json writes it (the same text)."""
    assert state_text({"a": None, "b": [1, None]}) == '{"a":null,"b":[1,null]}'  # no mark
    assert state_text([None, float("nan")]) == JSON_WROTE + "[null,NaN]"
    assert state_text((1, None)) == JSON_WROTE + "[1,null]"
    assert read_state(state_text((1, None))) == [1, None]


@given(ANY_JSON)
def test_a_parsed_state_reads_back_as_written(value: Any) -> None:
    """What :func:`loads` read, written with ``parsed=True``, reads back to the same value,
    NaN and infinities included (loads notes them, so the state is checked again)."""
    read = loads(json.dumps(value))
    text = state_text(read, parsed=True)
    assert json.dumps(read_state(text)) == json.dumps(value)


def test_a_parsed_state_is_not_read_back_until_a_nonfinite_float_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``parsed=True`` skips the read-back that tells a NaN from a None, which costs about
    three times orjson's write, until this process's loads or read_state meets a NaN or an
    infinity; from then on every state is checked again."""
    monkeypatch.setattr(json_rows, "_nonfinite_read", False)
    event = loads('{"id": "c1", "referrer": null, "price": 2.5}')
    assert not nonfinite_read()
    computed = {"event": event, "sum": float("inf")}  # not what parsed=True vouches for
    unchecked = '{"event":{"id":"c1","referrer":null,"price":2.5},"sum":null}'
    assert state_text(computed, parsed=True) == unchecked  # the NaN check was skipped
    assert state_text(computed) == JSON_WROTE + json.dumps(computed, separators=(",", ":"))
    for text in ('{"price": NaN}', "[1, -Infinity]"):
        monkeypatch.setattr(json_rows, "_nonfinite_read", False)
        read = loads(text)
        assert nonfinite_read()
        assert state_text({"event": read}, parsed=True).startswith(JSON_WROTE)  # checked
    monkeypatch.setattr(json_rows, "_nonfinite_read", False)
    read_state(" [1e400]")  # a state json wrote (the mark), beyond a double: infinity
    assert nonfinite_read()
    monkeypatch.setattr(json_rows, "_nonfinite_read", False)
    loads('{"deep": ' + "[" * 500 + "1.0" + "]" * 500 + "}")  # nests deeply, all finite
    assert not nonfinite_read()
