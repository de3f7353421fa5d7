"""LogManager topics and producer ids; TopicConfig properties."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from riverbed.log import (
    TOPIC_CONFIGS,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    LogManager,
    TimestampType,
    TopicConfig,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from riverbed.log.manager import PRODUCER_ID_BLOCK_SIZE
from tests.support.log_files import FakeClock, batch, offsets_in, read_all


def manager(data_dir: Path) -> LogManager:
    return LogManager.open(data_dir, defaults=TopicConfig(), clock=FakeClock())


def test_topics_survive_restart_with_their_data(tmp_path: Path) -> None:
    logs = manager(tmp_path)
    created = logs.create_topic("orders", partitions=3, configs={"segment.bytes": "1000"})
    logs.log("orders", 2).append(batch(4))
    assert logs.topic_config("orders").segment_bytes == 1000
    logs.close()
    logs = manager(tmp_path)
    assert logs.topics()["orders"] == created
    assert dict(logs.topics()["orders"].configs) == {"segment.bytes": "1000"}
    assert offsets_in(read_all(logs.log("orders", 2))) == [0]
    assert logs.log("orders", 0).log_end_offset == 0
    metadata = (tmp_path / "orders-1" / "partition.metadata").read_text()
    encoded = base64.urlsafe_b64encode(created.topic_id.bytes).rstrip(b"=").decode()
    assert metadata == f"version: 0\ntopic_id: {encoded}\n"


def test_topic_errors(tmp_path: Path) -> None:
    logs = manager(tmp_path)
    logs.create_topic("a.b", partitions=1)
    for bad in ["", ".", "..", "x" * 250, "sp ace", "slash/"]:
        with pytest.raises(InvalidTopicError):
            logs.create_topic(bad, partitions=1)
    with pytest.raises(InvalidTopicError):  # collides with a.b
        logs.create_topic("a_b", partitions=1)
    with pytest.raises(TopicExistsError):
        logs.create_topic("a.b", partitions=1)
    with pytest.raises(InvalidPartitionsError):
        logs.create_topic("zero", partitions=0)
    with pytest.raises(InvalidConfigError):
        logs.create_topic("cfg", partitions=1, configs={"no.such": "1"})
    assert set(logs.topics()) == {"a.b"}
    with pytest.raises(UnknownTopicOrPartitionError):
        logs.log("a.b", 1)
    with pytest.raises(UnknownTopicOrPartitionError):
        logs.log("nope", 0)
    logs.create_topic("x" * 249, partitions=1)


def test_create_partitions_and_delete(tmp_path: Path) -> None:
    logs = manager(tmp_path)
    logs.create_topic("t", partitions=1)
    logs.log("t", 0).append(batch(1))
    with pytest.raises(InvalidPartitionsError):
        logs.create_partitions("t", total=1)
    assert logs.create_partitions("t", total=3).partitions == 3
    logs.log("t", 2).append(batch(1))
    logs.delete_topic("t")
    assert "t" not in logs.topics()
    assert not any(p.name.startswith("t-") for p in tmp_path.iterdir())
    with pytest.raises(UnknownTopicOrPartitionError):
        logs.log("t", 0)
    logs.close()
    assert "t" not in manager(tmp_path).topics()
    again = manager(tmp_path)
    again.create_topic("t", partitions=1)
    assert again.log("t", 0).log_end_offset == 0


def test_producer_ids_are_never_reused(tmp_path: Path) -> None:
    logs = manager(tmp_path)
    first = [logs.allocate_producer_id() for _ in range(5)]
    assert first == [0, 1, 2, 3, 4]
    # a crash (no close) still never reuses them
    later = manager(tmp_path)
    assert later.allocate_producer_id() == PRODUCER_ID_BLOCK_SIZE
    ids = [later.allocate_producer_id() for _ in range(PRODUCER_ID_BLOCK_SIZE + 1)]
    assert len(set(ids)) == len(ids)
    assert manager(tmp_path).allocate_producer_id() == 3 * PRODUCER_ID_BLOCK_SIZE


def test_config_properties_round_trip() -> None:
    config = TopicConfig.from_properties(
        {
            "segment.ms": "60000",
            "message.timestamp.type": "LogAppendTime",
            "cleanup.policy": "compact",
            "retention.bytes": "-1",
            "min.cleanable.dirty.ratio": "0.25",
            "delete.retention.ms": "1000",
            "unclean.leader.election.enable": "TRUE",
        },
        base=TopicConfig(),
    )
    assert config.segment_ms == 60000
    assert (config.min_cleanable_dirty_ratio, config.delete_retention_ms) == (0.25, 1000)
    assert config.unclean_leader_election_enable is True
    assert config.message_timestamp_type is TimestampType.LOG_APPEND_TIME
    properties = config.to_properties()
    assert set(properties) == set(TOPIC_CONFIGS)
    assert TopicConfig.from_properties(properties, base=TopicConfig()) == config
    assert TopicConfig().to_properties()["segment.bytes"] == str(1 << 30)
    defaults = TopicConfig().to_properties()  # Kafka 4's defaults, in Kafka's spelling
    assert defaults["delete.retention.ms"] == "86400000"
    assert defaults["min.cleanable.dirty.ratio"] == "0.5"
    assert defaults["max.compaction.lag.ms"] == str(2**63 - 1)
    assert defaults["message.timestamp.after.max.ms"] == "3600000"
    assert defaults["unclean.leader.election.enable"] == "false"
    assert TOPIC_CONFIGS["segment.bytes"].broker_name == "log.segment.bytes"


@pytest.mark.parametrize(
    "name,value",
    [
        ("segment.bytes", "abc"),
        ("segment.bytes", "5"),
        ("retention.ms", "-2"),
        ("cleanup.policy", "keep"),
        ("compression.type", "brotli"),
        ("message.timestamp.type", "Now"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("min.cleanable.dirty.ratio", "half"),
        ("max.compaction.lag.ms", "0"),
        ("min.insync.replicas", "2"),  # one broker: one replica
        ("unclean.leader.election.enable", "yes"),
        ("unknown.name", "1"),
    ],
)
def test_config_rejects_bad_values(name: str, value: str) -> None:
    with pytest.raises(InvalidConfigError):
        TopicConfig.from_properties({name: value}, base=TopicConfig())


def test_alter_configs_reaches_the_logs(tmp_path: Path) -> None:
    logs = manager(tmp_path)
    logs.create_topic("t", partitions=2)
    logs.alter_topic_configs("t", {"max.message.bytes": "100"})
    assert logs.log("t", 1).config.max_message_bytes == 100
    assert dict(logs.topics()["t"].configs) == {"max.message.bytes": "100"}
