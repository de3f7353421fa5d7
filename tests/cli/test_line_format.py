"""Unit tests for produce's line parsing (Kafka's LineMessageReader properties)."""

from __future__ import annotations

import pytest

from riverbed.cli.errors import CliError
from riverbed.cli.produce_command import LineFormat, Record


def parse(line: bytes, **properties: str) -> Record:
    reader = LineFormat.from_properties({k.replace("_", "."): v for k, v in properties.items()})
    return reader.parse(line, line_number=1)


def test_plain_line_is_the_value() -> None:
    assert parse(b"a\tb:c") == Record(key=None, value=b"a\tb:c", headers=[])


def test_key_with_default_tab_separator_splits_once() -> None:
    assert parse(b"k\tv\tw", parse_key="true") == Record(key=b"k", value=b"v\tw", headers=[])


def test_key_with_escaped_separator() -> None:
    record = parse(b"k::v", parse_key="true", key_separator="::")
    assert (record.key, record.value) == (b"k", b"v")


def test_headers_then_key_then_value() -> None:
    record = parse(b"h1:a,h2:b:c\tk\tv", parse_headers="true", parse_key="true")
    assert record == Record(key=b"k", value=b"v", headers=[("h1", b"a"), ("h2", b"b:c")])


def test_empty_header_section() -> None:
    assert parse(b"\tv", parse_headers="true") == Record(key=None, value=b"v", headers=[])


def test_null_marker() -> None:
    record = parse(b"h:NULL\tNULL\tv", parse_headers="true", parse_key="true", null_marker="NULL")
    assert record == Record(key=None, value=b"v", headers=[("h", None)])


def test_missing_key_separator_is_an_error_naming_the_line() -> None:
    reader = LineFormat.from_properties({"parse.key": "true"})
    with pytest.raises(CliError, match="line 7: no key separator"):
        reader.parse(b"no separator", line_number=7)


def test_ignore_error_sends_the_whole_line_as_value() -> None:
    record = parse(b"no separator", parse_key="true", ignore_error="true")
    assert record == Record(key=None, value=b"no separator", headers=[])


def test_header_without_key_separator_is_an_error() -> None:
    with pytest.raises(CliError, match="has no key separator"):
        parse(b"h1\tv", parse_headers="true")


@pytest.mark.parametrize(
    "properties",
    [{"parse.kee": "true"}, {"parse.key": "1"}, {"key.separator": ""}],
    ids=["unknown", "not-bool", "empty-separator"],
)
def test_bad_properties_are_usage_errors(properties: dict[str, str]) -> None:
    with pytest.raises(CliError) as raised:
        LineFormat.from_properties(properties)
    assert raised.value.exit_code == 2
