"""Option parsing of the ``riverbed`` source (no Spark, no broker)."""

from __future__ import annotations

import re

import pytest

from riverbed.spark.errors import SourceOptionError
from riverbed.spark.source.options import (
    Assign,
    Bound,
    OffsetsPerPartition,
    Subscribe,
    SubscribePattern,
    TimestampForAll,
    TimestampPerPartition,
    TimestampStrategy,
    parse_source_options,
)

BOOTSTRAP = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_defaults_of_a_stream_and_a_batch_read() -> None:
    stream = parse_source_options({**BOOTSTRAP, "subscribe": "a, b,"}, streaming=True)
    assert stream.subscription == Subscribe(topics=frozenset({"a", "b"}))
    assert stream.starting is Bound.LATEST
    assert stream.fail_on_data_loss is True
    assert stream.include_headers is False
    assert stream.max_offsets_per_trigger is None
    assert stream.max_trigger_delay_ms == 15 * 60 * 1000
    assert stream.client_config["isolation.level"] == "read_committed"
    assert stream.client_config["bootstrap.servers"] == "127.0.0.1:9092"
    assert stream.client_config["group.id"].startswith("spark-kafka-source-")

    batch = parse_source_options({**BOOTSTRAP, "subscribe": "a"}, streaming=False)
    assert batch.starting is Bound.EARLIEST
    assert batch.ending is Bound.LATEST
    assert batch.client_config["group.id"].startswith("spark-kafka-relation-")


def test_names_are_case_insensitive_and_kafka_options_pass_through() -> None:
    options = parse_source_options(
        {
            "KAFKA.BOOTSTRAP.SERVERS": "h:1",
            "SubscribePattern": "clicks-.*",
            "maxoffsetspertrigger": "500",
            "MinOffsetsPerTrigger": "10",
            "maxTriggerDelay": "30s",
            "kafka.isolation.level": "read_uncommitted",
            "kafka.fetch.max.bytes": "1048576",
            "groupIdPrefix": "mine",
            "somethingSparkIgnores": "x",
        },
        streaming=True,
    )
    assert isinstance(options.subscription, SubscribePattern)
    assert options.max_offsets_per_trigger == 500
    assert options.min_offsets_per_trigger == 10
    assert options.max_trigger_delay_ms == 30_000
    assert options.client_config["isolation.level"] == "read_uncommitted"
    assert options.client_config["fetch.max.bytes"] == "1048576"
    assert options.client_config["group.id"].startswith("mine-")
    assert not options.isolation_committed


def test_subscribe_pattern_matches_whole_names_and_never_internal_topics() -> None:
    pattern = SubscribePattern(pattern=re.compile("clicks.*|__.*"))
    topics = {"clicks": 2, "clicks-eu": 1, "my-clicks": 1, "__consumer_offsets": 50}
    assert pattern.select(topics) == [("clicks", 0), ("clicks", 1), ("clicks-eu", 0)]


def test_assign_selects_the_partitions_that_exist() -> None:
    options = parse_source_options({**BOOTSTRAP, "assign": '{"a":[0,2,5],"b":[1]}'}, streaming=True)
    assert options.subscription == Assign(
        partitions=frozenset({("a", 0), ("a", 2), ("a", 5), ("b", 1)})
    )
    assert options.subscription.select({"a": 3, "c": 4}) == [("a", 0), ("a", 2)]


def test_starting_position_precedence() -> None:
    json_offsets = '{"t":{"0":23,"1":-2}}'
    by_timestamp = '{"t":{"0":1000,"1":2000}}'
    common = {**BOOTSTRAP, "subscribe": "t", "startingOffsets": json_offsets}
    assert parse_source_options(common, streaming=True).starting == OffsetsPerPartition(
        offsets={("t", 0): 23, ("t", 1): -2}
    )
    with_by = {**common, "startingOffsetsByTimestamp": by_timestamp}
    assert parse_source_options(with_by, streaming=True).starting == TimestampPerPartition(
        timestamps_ms={("t", 0): 1000, ("t", 1): 2000}
    )
    with_all = {
        **with_by,
        "startingTimestamp": "1500",
        "startingOffsetsByTimestampStrategy": "LATEST",
    }
    options = parse_source_options(with_all, streaming=True)
    assert options.starting == TimestampForAll(timestamp_ms=1500)
    assert options.timestamp_strategy is TimestampStrategy.LATEST


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"subscribe": "a", "kafka.bootstrap.servers": ""}, True, "'kafka.bootstrap.servers'"),
        ({}, True, "One of the options 'subscribe', 'subscribePattern' and 'assign'"),
        ({"subscribe": "a", "subscribePattern": "b"}, True, r"Only one of .*subscribePattern"),
        ({"subscribe": " , "}, True, "'subscribe' lists no topic"),
        ({"subscribePattern": "("}, True, "'subscribePattern' '\\(': missing \\)"),
        ({"assign": '{"a": 0}'}, True, "'assign': expected JSON such as"),
        ({"assign": '{"a": [-1]}'}, True, "'assign': expected JSON such as"),
        ({"subscribe": "a", "startingOffsets": "newest"}, True, "'startingOffsets': expected"),
        ({"subscribe": "a", "startingOffsets": '{"a":{"0":-3}}'}, True, "offset -3 of a-0"),
        ({"subscribe": "a", "startingOffsets": "latest"}, False, "can't be 'latest' for batch"),
        ({"subscribe": "a", "startingOffsets": '{"a":{"0":-1}}'}, False, "offset -1 of a-0"),
        ({"subscribe": "a", "endingOffsets": "earliest"}, False, "can't be 'earliest' for batch"),
        ({"subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, False, "offset -2 of a-0"),
        ({"subscribe": "a", "endingOffsets": "latest"}, True, "'endingOffsets' is for batch"),
        ({"subscribe": "a", "endingTimestamp": "5"}, True, "'endingTimestamp' is for batch"),
        ({"subscribe": "a", "startingTimestamp": "yesterday"}, True, "'startingTimestamp' must"),
        (
            {"subscribe": "a", "startingOffsetsByTimestamp": '{"a":{"0":-5}}'},
            True,
            "'startingOffsetsByTimestamp' takes timestamps",
        ),
        (
            {"subscribe": "a", "startingOffsetsByTimestampStrategy": "ignore"},
            True,
            "'startingOffsetsByTimestampStrategy' must be 'error' or 'latest'",
        ),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, True, "'maxOffsetsPerTrigger' must be"),
        ({"subscribe": "a", "minOffsetsPerTrigger": "x"}, True, "'minOffsetsPerTrigger' must be"),
        ({"subscribe": "a", "maxTriggerDelay": "soon"}, True, "'maxTriggerDelay' must be"),
        ({"subscribe": "a", "minPartitions": "-1"}, True, "'minPartitions' must be"),
        ({"subscribe": "a", "failOnDataLoss": "yes"}, True, "'failOnDataLoss' must be"),
        ({"subscribe": "a", "includeHeaders": "1"}, True, "'includeHeaders' must be"),
        ({"subscribe": "a", "kafka.auto.offset.reset": "x"}, True, "'kafka.auto.offset.reset'"),
        ({"subscribe": "a", "kafka.enable.auto.commit": "x"}, True, "'kafka.enable.auto.commit'"),
        ({"subscribe": "a", "kafka.isolation.level": "serial"}, True, "'kafka.isolation.level'"),
    ],
)
def test_bad_options_name_the_option(
    options: dict[str, str], streaming: bool, message: str
) -> None:
    with pytest.raises(SourceOptionError, match=message):
        parse_source_options({**BOOTSTRAP, **options}, streaming=streaming)


@pytest.mark.parametrize(
    ("text", "ms"), [("15m", 900_000), ("500", 500), ("2h", 7_200_000), ("10 s", 10_000)]
)
def test_max_trigger_delay_durations(text: str, ms: int) -> None:
    options = parse_source_options(
        {**BOOTSTRAP, "subscribe": "a", "maxTriggerDelay": text}, streaming=True
    )
    assert options.max_trigger_delay_ms == ms
