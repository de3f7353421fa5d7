"""Topic configs through kafka-python's KafkaAdminClient (synonym lists in order, config
types, AlterConfigs and IncrementalAlterConfigs), and on the wire what clients cannot send
(duplicates, unknown operations, other resource types)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.describe_configs.v4.request import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.static.primitive import i8

from riverbed.broker import Broker
from riverbed.protocol import ApiKey
from tests.support.brokers import create_topic
from tests.support.wire import WireClient

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

TOPIC, BROKER, GROUP = 2, 4, 3


@pytest.fixture
def configured(tmp_path: Path) -> Iterator[Broker]:
    """A broker given log.retention.ms and .hours (ms wins) and log.segment.bytes."""
    settings = {
        "log.retention.ms": "5000",
        "log.retention.hours": "24",
        "log.segment.bytes": "2097152",
    }
    with Broker(tmp_path / "data", listen="127.0.0.1:0", config=settings) as running:
        yield running


@pytest.fixture
def admin(configured: Broker) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=configured.bootstrap_servers)
    yield client
    client.close()


def topic_configs(admin: KafkaAdminClient, topic: str, **options: Any) -> dict[str, Any]:
    resource = ConfigResource(ConfigResourceType.TOPIC, topic)
    described = admin.describe_configs([resource], config_filter="all", **options)
    configs: dict[str, Any] = described["topic"][topic]
    return configs


def synonyms(entry: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(s["name"], s["value"], s["source"]) for s in entry["synonyms"]]


def test_synonyms_in_kafkas_order_and_config_types(admin: KafkaAdminClient) -> None:
    admin.create_topics([NewTopic("kp", 1, 1, topic_configs={"retention.ms": "1000"})])
    configs = topic_configs(admin, "kp", include_synonyms=True)

    retention = configs["retention.ms"]
    assert (retention["value"], retention["config_source"]) == ("1000", "DYNAMIC_TOPIC_CONFIG")
    assert synonyms(retention) == [
        ("retention.ms", "1000", "DYNAMIC_TOPIC_CONFIG"),
        ("log.retention.ms", "5000", "STATIC_BROKER_CONFIG"),
        ("log.retention.hours", "24", "STATIC_BROKER_CONFIG"),
        ("log.retention.hours", "168", "DEFAULT_CONFIG"),
    ]
    assert synonyms(configs["segment.bytes"]) == [
        ("log.segment.bytes", "2097152", "STATIC_BROKER_CONFIG"),
        ("log.segment.bytes", "1073741824", "DEFAULT_CONFIG"),
    ]
    assert synonyms(configs["segment.ms"]) == [("log.roll.hours", "168", "DEFAULT_CONFIG")]
    types = {name: entry["config_type"] for name, entry in configs.items()}
    assert types["retention.ms"] == "LONG"
    assert types["segment.bytes"] == "INT"
    assert types["cleanup.policy"] == "LIST"
    assert types["min.cleanable.dirty.ratio"] == "DOUBLE"
    assert types["unclean.leader.election.enable"] == "BOOLEAN"
    assert types["message.timestamp.type"] == "STRING"
    assert all(not entry["read_only"] for entry in configs.values())
    assert all(entry["synonyms"] == [] for entry in topic_configs(admin, "kp").values())


def test_broker_resource_lists_its_static_settings(admin: KafkaAdminClient) -> None:
    resource = ConfigResource(ConfigResourceType.BROKER, "0")
    described = admin.describe_configs([resource], include_synonyms=True, config_filter="all")
    configs = described["broker"]["0"]
    assert configs["log.retention.ms"]["value"] == "5000"
    assert configs["log.retention.hours"]["value"] == "24"
    assert configs["log.retention.hours"]["config_source"] == "STATIC_BROKER_CONFIG"
    assert configs["log.retention.minutes"]["value"] is None
    assert configs["log.roll.hours"]["value"] == "168"
    assert configs["log.roll.hours"]["config_source"] == "DEFAULT_CONFIG"
    expected = {
        "log.retention.check.interval.ms": ("300000", "LONG"),
        "log.cleaner.enable": ("true", "BOOLEAN"),
        "log.cleaner.backoff.ms": ("15000", "LONG"),
        "log.cleaner.threads": ("1", "INT"),
        "log.cleaner.dedupe.buffer.size": ("134217728", "LONG"),
        "log.cleaner.io.max.bytes.per.second": ("1.7976931348623157E308", "DOUBLE"),
    }
    for name, (value, kind) in expected.items():
        assert (configs[name]["value"], configs[name]["config_type"]) == (value, kind), name
        assert configs[name]["config_source"] == "DEFAULT_CONFIG"
    assert all(entry["read_only"] for entry in configs.values())


def test_kafka_python_alters_incrementally_and_the_legacy_way(admin: KafkaAdminClient) -> None:
    admin.create_topics([NewTopic("kpa", 1, 1, topic_configs={"retention.ms": "1000"})])
    resource = ConfigResource(ConfigResourceType.TOPIC, "kpa", configs={"segment.ms": "60000"})
    assert admin.alter_configs([resource]) == {"topic": {"kpa": "OK"}}  # incremental
    legacy = ConfigResource(ConfigResourceType.TOPIC, "kpa", configs={"flush.ms": "100"})
    assert admin.alter_configs([legacy], incremental=False) == {"topic": {"kpa": "OK"}}
    modified = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kpa")])
    values = {name: entry["value"] for name, entry in modified["topic"]["kpa"].items()}
    # kafka-python re-sends the other overrides with AlterConfigs, which replaces the set.
    assert values == {"retention.ms": "1000", "segment.ms": "60000", "flush.ms": "100"}

    reset = ConfigResource(ConfigResourceType.TOPIC, "kpa", configs=["retention.ms"])
    assert admin.reset_configs([reset]) == {"topic": {"kpa": "OK"}}
    assert topic_configs(admin, "kpa")["retention.ms"]["value"] == "5000"  # the broker's

    bad = ConfigResource(ConfigResourceType.TOPIC, "kpa", configs={"flush.ms": "often"})
    answer = admin.alter_configs([bad], raise_on_unknown=False)["topic"]["kpa"]
    assert "InvalidConfigurationError" in answer
    assert "flush.ms: 'often' is not an integer" in answer


def alterable(name: str, op: int, value: str | None) -> AlterableConfig:
    return AlterableConfig(name=name, config_operation=i8(op), value=value)


def incremental_request(*resources: tuple[int, str, tuple[AlterableConfig, ...]]) -> Any:
    return IncrementalAlterConfigsRequest(
        resources=tuple(
            AlterConfigsResource(resource_type=i8(kind), resource_name=name, configs=configs)
            for kind, name, configs in resources
        ),
        validate_only=False,
    )


def test_on_the_wire_refusals_name_the_problem(configured: Broker) -> None:
    create_topic(configured.bootstrap_servers, "w", partitions=1)
    set_retention = (alterable("retention.ms", 0, "1"),)
    cases = [
        (incremental_request((TOPIC, "w", set_retention), (TOPIC, "w", set_retention)), "once"),
        (incremental_request((TOPIC, "w", set_retention * 2)), "'retention.ms' is named twice"),
        (incremental_request((TOPIC, "w", (alterable("retention.ms", 7, "1"),))), "operation 7"),
        (incremental_request((TOPIC, "w", (alterable("retention.ms", 0, None),))), "needs a value"),
        (incremental_request((GROUP, "g", set_retention)), "resource type 3 is not supported"),
    ]
    with WireClient(configured.bootstrap_servers) as client:
        for request, message in cases:
            response = client.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, request)
            for answer in response.responses:
                assert answer.error_code == ErrorCode.invalid_request, message
                assert message in answer.error_message
        describe = DescribeConfigsRequest(
            resources=(
                DescribeConfigsResource(
                    resource_type=i8(TOPIC), resource_name="w", configuration_keys=("retention.ms",)
                ),
                DescribeConfigsResource(
                    resource_type=i8(BROKER), resource_name="7", configuration_keys=None
                ),
            ),
            include_synonyms=False,
            include_documentation=True,
        )
        topic, other_broker = client.request(ApiKey.DESCRIBE_CONFIGS, 4, describe).results
    assert [(c.name, c.value) for c in topic.configs] == [("retention.ms", "5000")]
    assert topic.configs[0].documentation
    assert other_broker.error_code == ErrorCode.invalid_request
    assert "this is broker 0" in other_broker.error_message


def test_api_versions_advertises_the_config_and_delete_records_apis(configured: Broker) -> None:
    with WireClient(configured.bootstrap_servers) as client:
        response = client.request(
            ApiKey.API_VERSIONS,
            3,
            ApiVersionsRequest(client_software_name="t", client_software_version="1"),
        )
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[ApiKey.DESCRIBE_CONFIGS] == (1, 4)
    assert ranges[ApiKey.ALTER_CONFIGS] == (0, 2)
    assert ranges[ApiKey.INCREMENTAL_ALTER_CONFIGS] == (0, 1)
    assert ranges[ApiKey.DELETE_RECORDS] == (0, 2)
