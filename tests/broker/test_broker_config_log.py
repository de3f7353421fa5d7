"""Broker-level log settings: Kafka's alias chains (ms over minutes over hours), the cleaner's
and retention checker's settings, and errors reported under the name the user gave."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from riverbed.broker.config import DOUBLE_MAX, BrokerConfig, ConfigError, log_setting_names
from riverbed.log.topic_config import RETENTION_MS, SEGMENT_MS
from tests.support.cli import run_riverbed

HOUR_MS = 3_600_000


def build(**properties: str) -> BrokerConfig:
    config, unknown = BrokerConfig.build(
        data_dir=Path("/d"), properties={k.replace("_", "."): v for k, v in properties.items()}
    )
    assert unknown == []
    return config


def retention_ms(**properties: str) -> int:
    return build(**properties).log_defaults.retention_ms


def test_retention_defaults_to_kafkas_168_hours() -> None:
    assert retention_ms() == RETENTION_MS == 168 * HOUR_MS
    assert build().log_defaults.segment_ms == SEGMENT_MS == 168 * HOUR_MS


@pytest.mark.parametrize(
    ("properties", "expected"),
    [
        ({"log_retention_hours": "24"}, 24 * HOUR_MS),
        ({"log_retention_minutes": "90"}, 90 * 60_000),
        ({"log_retention_ms": "1234"}, 1234),
        ({"log_retention_hours": "24", "log_retention_minutes": "90"}, 90 * 60_000),
        ({"log_retention_hours": "24", "log_retention_ms": "1234"}, 1234),
        ({"log_retention_minutes": "90", "log_retention_ms": "1234"}, 1234),
        (
            {"log_retention_hours": "24", "log_retention_minutes": "90", "log_retention_ms": "5"},
            5,
        ),
        ({"log_retention_hours": "-1"}, -1),
        ({"log_retention_minutes": "-1"}, -1),
        ({"log_retention_ms": "-1"}, -1),
        ({"log_retention_hours": "-1", "log_retention_minutes": "10"}, 600_000),
        ({"log_retention_hours": "2", "log_retention_minutes": "-1"}, -1),
        ({"log_retention_hours": "0"}, 0),
    ],
)
def test_retention_finest_unit_wins(properties: dict[str, str], expected: int) -> None:
    assert retention_ms(**properties) == expected


def test_roll_ms_wins_over_roll_hours() -> None:
    assert build(log_roll_hours="2").log_defaults.segment_ms == 2 * HOUR_MS
    assert build(log_roll_hours="2", log_roll_ms="60000").log_defaults.segment_ms == 60_000


def test_largest_hours_fit_in_milliseconds() -> None:
    assert retention_ms(log_retention_hours=str(2**31 - 1)) == (2**31 - 1) * HOUR_MS


def test_a_bad_coarser_value_is_refused_even_when_a_finer_one_wins() -> None:
    """Kafka parses every setting it is given, used or not."""
    with pytest.raises(ConfigError, match=re.escape("log.retention.hours='x'")):
        BrokerConfig.build(
            data_dir=Path("/d"),
            properties={"log.retention.ms": "1000", "log.retention.hours": "x"},
        )


def test_static_settings_keep_the_names_and_texts_given() -> None:
    config, _ = BrokerConfig.build(
        data_dir=Path("/d"),
        properties={"log.retention.hours": " 24", "num.partitions": "3", "unknown.thing": "1"},
        listen="127.0.0.1:0",
    )
    assert dict(config.static_settings) == {
        "log.retention.hours": " 24",
        "num.partitions": "3",
        "listeners": "127.0.0.1:0",
    }


def test_synonym_names_finest_first() -> None:
    assert log_setting_names("retention.ms") == (
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
    )
    assert log_setting_names("segment.ms") == ("log.roll.ms", "log.roll.hours")
    assert log_setting_names("segment.bytes") == ("log.segment.bytes",)


def test_cleaner_and_retention_checker_defaults_are_kafkas() -> None:
    config = build()
    assert config.log_retention_check_interval_ms == 300_000
    assert config.log_cleaner_enable is True
    assert config.log_cleaner_backoff_ms == 15_000
    assert config.log_cleaner_threads == 1
    assert config.log_cleaner_dedupe_buffer_size == 128 * 1024 * 1024
    assert config.log_cleaner_io_max_bytes_per_second == DOUBLE_MAX == 1.7976931348623157e308


def test_cleaner_and_retention_checker_settings_parse() -> None:
    config = build(
        log_retention_check_interval_ms="1000",
        log_cleaner_enable="false",
        log_cleaner_backoff_ms="0",
        log_cleaner_threads="1",
        log_cleaner_dedupe_buffer_size="1048576",
        log_cleaner_io_max_bytes_per_second="1e6",
    )
    assert config.log_retention_check_interval_ms == 1000
    assert config.log_cleaner_enable is False
    assert config.log_cleaner_backoff_ms == 0
    assert config.log_cleaner_dedupe_buffer_size == 1_048_576
    assert config.log_cleaner_io_max_bytes_per_second == 1_000_000.0


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("log.retention.hours", "a day", "expected a whole number, got 'a day'"),
        ("log.retention.hours", "-2", "expected a whole number in [-1,"),
        ("log.retention.hours", str(2**31), "expected a whole number in [-1, 2147483647]"),
        ("log.retention.minutes", "1.5", "expected a whole number"),
        ("log.retention.ms", "-2", "-2 is outside"),
        ("log.roll.hours", "0", "expected a whole number in [1,"),
        ("log.roll.ms", "0", "0 is outside"),
        ("log.cleaner.threads", "2", "one cleaner thread; only 1 is accepted, not 2"),
        ("log.cleaner.threads", "0", "expected a whole number in [1,"),
        ("log.cleaner.io.max.bytes.per.second", "0", "expected a number above 0, got 0"),
        ("log.cleaner.io.max.bytes.per.second", "nan", "expected a number above 0"),
        ("log.cleaner.io.max.bytes.per.second", "fast", "expected a number, got 'fast'"),
        ("log.cleaner.enable", "yes", "expected true or false"),
        ("log.cleaner.backoff.ms", "-1", "expected a whole number in [0,"),
        ("log.cleaner.dedupe.buffer.size", "0", "expected a whole number in [1,"),
        ("log.retention.check.interval.ms", "0", "expected a whole number in [1,"),
    ],
)
def test_bad_values_are_reported_under_the_name_given(name: str, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        BrokerConfig.build(data_dir=Path("/d"), properties={name: text})
    assert str(raised.value).startswith(f"{name}={text!r}: ")
    assert message in str(raised.value)


def test_broker_command_reports_a_bad_alias_in_one_line(tmp_path: Path) -> None:
    done = run_riverbed(
        "broker", "--data-dir", str(tmp_path / "d"), "--set", "log.retention.minutes=soon"
    )
    assert done.returncode == 2, done.stderr
    assert "log.retention.minutes='soon'" in done.stderr
    assert "Traceback" not in done.stderr
