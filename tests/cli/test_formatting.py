"""Unit tests for consume's record formatting (kcat format strings, Kafka print.* properties)."""

from __future__ import annotations

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Message

from riverbed.cli.errors import CliError
from riverbed.cli.formatting import compile_format, compile_properties
from riverbed.cli.properties import unescape


def message(**overrides: object) -> Message:
    fields: dict[str, object] = {
        "topic": "orders",
        "partition": 2,
        "offset": 17,
        "key": b"k1",
        "value": b"v1",
        "headers": [("h1", b"x"), ("h2", None)],
        "timestamp": (TIMESTAMP_CREATE_TIME, 1_700_000_000_000),
    }
    fields.update(overrides)
    return Message(**fields)


def test_every_placeholder() -> None:
    formatter = compile_format("%t|%p|%o|%k|%K|%s|%S|%T|%h|%%\\n")
    assert formatter(message()) == b"orders|2|17|k1|2|v1|2|1700000000000|h1=x,h2=|%\n"


def test_default_format_is_the_value_on_its_own_line() -> None:
    assert compile_format("%s\\n")(message(value=b"\x00\xff")) == b"\x00\xff\n"


def test_nulls_print_as_nothing_and_lengths_as_minus_one() -> None:
    formatter = compile_format("[%k][%K][%s][%S][%h]")
    assert formatter(message(key=None, value=None, headers=None)) == b"[][-1][][-1][]"


@pytest.mark.parametrize("fmt", ["%x", "value %", "%s%q"])
def test_unknown_placeholders_are_usage_errors(fmt: str) -> None:
    with pytest.raises(CliError) as raised:
        compile_format(fmt)
    assert raised.value.exit_code == 2


def test_unescape() -> None:
    assert unescape("a\\tb\\nc\\\\d\\x") == "a\tb\nc\\d\\x"


def test_kafka_properties_in_kafka_order() -> None:
    formatter = compile_properties(
        {
            "print.key": "true",
            "print.partition": "true",
            "print.offset": "true",
            "print.timestamp": "true",
            "print.headers": "true",
        }
    )
    assert formatter(message()) == (
        b"CreateTime:1700000000000\tPartition:2\tOffset:17\th1:x,h2:null\tk1\tv1\n"
    )


def test_kafka_properties_nulls_separators_and_no_headers() -> None:
    formatter = compile_properties(
        {"print.key": "true", "print.headers": "true", "key.separator": " | "}
    )
    timestamp = (TIMESTAMP_LOG_APPEND_TIME, 5)
    assert formatter(message(key=None, headers=None, timestamp=timestamp)) == (
        b"NO_HEADERS | null | v1\n"
    )


@pytest.mark.parametrize(
    "properties", [{"print.kee": "true"}, {"print.key": "yes"}], ids=["unknown", "not-bool"]
)
def test_bad_properties_are_usage_errors(properties: dict[str, str]) -> None:
    with pytest.raises(CliError) as raised:
        compile_properties(properties)
    assert raised.value.exit_code == 2
