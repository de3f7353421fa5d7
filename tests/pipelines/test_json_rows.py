"""The JSON the operators keep their states in: written with orjson (``state_text``) and read
back (``loads``) to the same value, including what orjson alone would refuse."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from riverbed.pipelines.operators.json_rows import dumps, loads, state_text

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
