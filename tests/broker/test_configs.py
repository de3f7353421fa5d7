"""Topic configs through confluent-kafka's AdminClient: DescribeConfigs (sources, synonyms),
IncrementalAlterConfigs and AlterConfigs, refusals, validate_only, restarts, and changed
configs taking effect on a live topic."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

from riverbed.broker import Broker
from riverbed.log.topic_config import MAX_MESSAGE_BYTES

BROKER_SETTINGS = {"log.retention.hours": "24", "log.segment.bytes": "2097152"}


@pytest.fixture
def configured(tmp_path: Path) -> Iterator[Broker]:
    """An in-process broker with two log-level settings of its own (STATIC_BROKER_CONFIG)."""
    with Broker(tmp_path / "data", listen="127.0.0.1:0", config=BROKER_SETTINGS) as running:
        yield running


def admin_for(broker: Broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap_servers})


def create(admin: AdminClient, topic: str, **configs: str) -> None:
    admin.create_topics([NewTopic(topic, num_partitions=1, config=configs)])[topic].result(30)


def describe(admin: AdminClient, topic: str) -> dict[str, Any]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(timeout=30)  # type: ignore[no-any-return]


def incremental(
    admin: AdminClient, topic: str, *ops: tuple[str, str | None, AlterConfigOpType], **kw: Any
) -> None:
    entries = [ConfigEntry(n, v, incremental_operation=op) for n, v, op in ops]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    admin.incremental_alter_configs([resource], **kw)[resource].result(timeout=30)


def legacy_alter(admin: AdminClient, resource: ConfigResource, **kw: Any) -> None:
    """AlterConfigs (deprecated in confluent-kafka, which warns, but still Kafka's API)."""
    with pytest.deprecated_call():
        future = admin.alter_configs([resource], **kw)[resource]
    future.result(timeout=30)


def refusal(call: Any) -> KafkaError:
    with pytest.raises(KafkaException) as raised:
        call()
    error: KafkaError = raised.value.args[0]
    return error


SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE
APPEND, SUBTRACT = AlterConfigOpType.APPEND, AlterConfigOpType.SUBTRACT


def test_describe_reports_sources_synonyms_and_that_topic_configs_are_changeable(
    configured: Broker,
) -> None:
    admin = admin_for(configured)
    create(admin, "described", **{"retention.bytes": "1000000"})
    configs = describe(admin, "described")

    overridden = configs["retention.bytes"]
    assert overridden.value == "1000000"
    assert overridden.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert list(overridden.synonyms) == ["retention.bytes", "log.retention.bytes"]
    assert overridden.synonyms["retention.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert overridden.synonyms["log.retention.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert overridden.synonyms["log.retention.bytes"].value == "-1"

    by_hours = configs["retention.ms"]  # log.retention.hours=24 on the broker
    assert by_hours.value == str(24 * 3_600_000)
    assert by_hours.source == ConfigSource.STATIC_BROKER_CONFIG.value
    segment = configs["segment.bytes"]
    assert (segment.value, segment.source) == ("2097152", ConfigSource.STATIC_BROKER_CONFIG.value)
    policy = configs["cleanup.policy"]
    assert (policy.value, policy.source) == ("delete", ConfigSource.DEFAULT_CONFIG.value)
    assert policy.synonyms["log.cleanup.policy"].value == "delete"
    assert all(not entry.is_read_only for entry in configs.values())


def test_incremental_set_append_subtract_and_delete_back_to_the_default(broker: Broker) -> None:
    admin = admin_for(broker)
    create(admin, "inc")
    incremental(
        admin, "inc", ("retention.ms", "3600000", SET), ("cleanup.policy", "compact", APPEND)
    )
    configs = describe(admin, "inc")
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "delete,compact"  # appended to the default

    incremental(admin, "inc", ("cleanup.policy", "delete", SUBTRACT))
    assert describe(admin, "inc")["cleanup.policy"].value == "compact"
    incremental(admin, "inc", ("cleanup.policy", "compact", APPEND))  # already there
    assert describe(admin, "inc")["cleanup.policy"].value == "compact"

    incremental(admin, "inc", ("retention.ms", None, DELETE), ("cleanup.policy", None, DELETE))
    configs = describe(admin, "inc")
    assert configs["retention.ms"].value == str(7 * 24 * 3_600_000)
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["cleanup.policy"].value == "delete"
    assert configs["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value


def test_alter_configs_replaces_the_whole_override_set(broker: Broker) -> None:
    admin = admin_for(broker)
    create(admin, "whole", **{"retention.ms": "1000", "segment.bytes": "1048576"})
    resource = ConfigResource(
        ConfigResource.Type.TOPIC, "whole", set_config={"max.message.bytes": "50000"}
    )
    legacy_alter(admin, resource)
    configs = describe(admin, "whole")
    overridden = {
        n for n, e in configs.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    }
    assert overridden == {"max.message.bytes"}
    assert configs["retention.ms"].value == str(7 * 24 * 3_600_000)


@pytest.mark.parametrize(
    ("op", "message"),
    [
        (("retention.ms", "soon", SET), "retention.ms: 'soon' is not an integer"),
        (("retention.ms", "-2", SET), "retention.ms: -2 is outside [-1,"),
        (("cleanup.policy", "shred", SET), "cleanup.policy: 'shred' is not one of"),
        (("cleanup.policy", "delete,compact", SUBTRACT), "cleanup.policy: '' is not one of"),
        (("retention.ms", "5", APPEND), "retention.ms: APPEND is only for list configs"),
        (("segment.bytes", "5", SUBTRACT), "segment.bytes: SUBTRACT is only for list configs"),
        (("retention.mss", "5", SET), "unknown topic config 'retention.mss'"),
    ],
)
def test_invalid_changes_are_refused_with_invalid_config_and_change_nothing(
    broker: Broker, op: tuple[str, str, AlterConfigOpType], message: str
) -> None:
    admin = admin_for(broker)
    create(admin, "strict", **{"retention.ms": "1000"})
    error = refusal(lambda: incremental(admin, "strict", ("segment.ms", "1000", SET), op))
    assert error.code() == KafkaError.INVALID_CONFIG
    assert message in error.str()
    configs = describe(admin, "strict")
    assert configs["retention.ms"].value == "1000"
    assert configs["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value  # all or nothing


def test_unknown_topic_and_broker_resources_are_refused(broker: Broker) -> None:
    admin = admin_for(broker)
    error = refusal(lambda: incremental(admin, "nowhere", ("retention.ms", "1", SET)))
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert "'nowhere' does not exist" in error.str()

    entries = [ConfigEntry("num.partitions", "3", incremental_operation=SET)]
    resource = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=entries)
    error = refusal(lambda: admin.incremental_alter_configs([resource])[resource].result(30))
    assert error.code() == KafkaError.INVALID_REQUEST
    assert "riverbed broker --set" in error.str()
    legacy = ConfigResource(ConfigResource.Type.BROKER, "0", set_config={"num.partitions": "3"})
    error = refusal(lambda: legacy_alter(admin, legacy))
    assert error.code() == KafkaError.INVALID_REQUEST
    broker_resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    configs = admin.describe_configs([broker_resource])[broker_resource].result(timeout=30)
    assert configs["num.partitions"].value == "1"
    assert configs["num.partitions"].is_read_only


def test_validate_only_validates_and_changes_nothing(broker: Broker) -> None:
    admin = admin_for(broker)
    create(admin, "dry")
    incremental(admin, "dry", ("retention.ms", "1000", SET), validate_only=True)
    legacy = ConfigResource(ConfigResource.Type.TOPIC, "dry", set_config={"retention.ms": "5"})
    legacy_alter(admin, legacy, validate_only=True)
    assert describe(admin, "dry")["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    error = refusal(
        lambda: incremental(admin, "dry", ("retention.ms", "x", SET), validate_only=True)
    )
    assert error.code() == KafkaError.INVALID_CONFIG


def test_overrides_survive_a_restart(tmp_path: Path) -> None:
    with Broker(tmp_path / "data", listen="127.0.0.1:0") as first:
        admin = admin_for(first)
        create(admin, "kept")
        incremental(
            admin, "kept", ("retention.ms", "60000", SET), ("cleanup.policy", "compact", SET)
        )
    with Broker(tmp_path / "data", listen="127.0.0.1:0") as second:
        configs = describe(admin_for(second), "kept")
    assert configs["retention.ms"].value == "60000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "compact"


def produce(bootstrap: str, topic: str, value: bytes) -> KafkaError | None:
    """The delivery error of one record (None if it was written)."""
    outcome: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 10_000_000})
    producer.produce(topic, value=value, on_delivery=lambda err, _msg: outcome.append(err))
    assert producer.flush(30) == 0
    return outcome[0]


def test_max_message_bytes_takes_effect_on_a_live_topic(broker: Broker) -> None:
    admin = admin_for(broker)
    create(admin, "live")
    big = b"x" * 20_000
    assert produce(broker.bootstrap_servers, "live", big) is None
    incremental(admin, "live", ("max.message.bytes", "10000", SET))
    error = produce(broker.bootstrap_servers, "live", big)
    assert error is not None
    assert error.code() == KafkaError.MSG_SIZE_TOO_LARGE
    incremental(admin, "live", ("max.message.bytes", None, DELETE))
    assert describe(admin, "live")["max.message.bytes"].value == str(MAX_MESSAGE_BYTES)
    assert produce(broker.bootstrap_servers, "live", big) is None


def test_segment_bytes_takes_effect_on_a_live_topic(tmp_path: Path) -> None:
    with Broker(tmp_path / "data", listen="127.0.0.1:0") as running:
        admin = admin_for(running)
        create(admin, "rolled")
        for _ in range(3):
            assert produce(running.bootstrap_servers, "rolled", b"y" * 3000) is None
        assert len(list((tmp_path / "data" / "rolled-0").glob("*.log"))) == 1
        incremental(admin, "rolled", ("segment.bytes", "4096", SET))
        for _ in range(3):
            assert produce(running.bootstrap_servers, "rolled", b"y" * 3000) is None
        assert len(list((tmp_path / "data" / "rolled-0").glob("*.log"))) >= 3
