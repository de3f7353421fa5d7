"""The admin requests ``riverbed groups`` makes, each answered with plain Python values.

One function per Kafka request, sent with confluent-kafka's AdminClient and bounded by
``REQUEST_TIMEOUT_S``: ``describe_groups`` (DescribeGroups), ``committed_offsets``
(OffsetFetch), ``list_offsets`` (ListOffsets) and ``commit_offsets`` (OffsetCommit as an
admin, outside any generation). A failure the tool cannot explain better becomes one
``CliError`` line.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    TopicPartition,
)

# confluent_kafka.admin ships type hints but re-exports these names without declaring them
# (no __all__), so mypy --strict does not count them as exported.
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from riverbed.cli.confluent import REQUEST_TIMEOUT_S, admin_error_code, admin_result
from riverbed.cli.errors import CliError
from riverbed.cli.offset_reset import Partition

__all__ = [
    "INACTIVE_STATES",
    "STATE_NAMES",
    "commit_offsets",
    "committed_offsets",
    "describe_groups",
    "list_offsets",
    "partition_names",
]

# Kafka's names for group states (ConsumerGroupState in the Java client), as its tool prints them.
STATE_NAMES: dict[ConsumerGroupState, str] = {
    ConsumerGroupState.UNKNOWN: "Unknown",
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.EMPTY: "Empty",
}
# States in which a group has no members whose commits would undo a reset (Kafka's rule).
INACTIVE_STATES = {ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD}


def describe_groups(admin: AdminClient, groups: list[str]) -> dict[str, Any | None]:
    """DescribeGroups: each group's description, or None for a group that does not exist.

    A classic broker answers for an unknown group with state Dead; Kafka 4 answers
    GROUP_ID_NOT_FOUND. Both mean the same.
    """
    futures = admin.describe_consumer_groups(groups, request_timeout=REQUEST_TIMEOUT_S)
    described: dict[str, Any | None] = {}
    for group in groups:
        future = futures[group]
        if admin_error_code(future) == KafkaError.GROUP_ID_NOT_FOUND:
            described[group] = None
            continue
        description = admin_result(future, f"cannot describe consumer group {group!r}")
        described[group] = None if description.state == ConsumerGroupState.DEAD else description
    return described


def committed_offsets(admin: AdminClient, group: str) -> dict[Partition, int]:
    """OffsetFetch for all of the group's partitions: the committed offsets it has."""
    request = [ConsumerGroupTopicPartitions(group)]
    future = admin.list_consumer_group_offsets(request, request_timeout=REQUEST_TIMEOUT_S)[group]
    if admin_error_code(future) == KafkaError.GROUP_ID_NOT_FOUND:
        return {}
    result = admin_result(future, f"cannot fetch the committed offsets of group {group!r}")
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in result.topic_partitions
        if tp.error is None and tp.offset >= 0
    }


def list_offsets(
    admin: AdminClient, partitions: Iterable[Partition], spec: OffsetSpec
) -> dict[Partition, int]:
    """ListOffsets: ``spec``'s offset of each partition; a partition that failed is left out."""
    query = {TopicPartition(topic, partition): spec for topic, partition in partitions}
    if not query:
        return {}
    futures = admin.list_offsets(query, request_timeout=REQUEST_TIMEOUT_S)
    found = {}
    for tp, future in futures.items():
        if admin_error_code(future) is None:
            found[(tp.topic, tp.partition)] = future.result().offset
    return found


def partition_names(partitions: Iterable[Partition]) -> str:
    return ", ".join(f"{topic}:{partition}" for topic, partition in partitions)


def commit_offsets(admin: AdminClient, group: str, plan: dict[Partition, int]) -> None:
    """OffsetCommit (as an admin, outside any generation); a refused partition fails the run."""
    offsets = [
        TopicPartition(topic, partition, offset) for (topic, partition), offset in plan.items()
    ]
    request = [ConsumerGroupTopicPartitions(group, offsets)]
    future = admin.alter_consumer_group_offsets(request, request_timeout=REQUEST_TIMEOUT_S)[group]
    result = admin_result(future, f"cannot commit the offsets of group {group!r}")
    failed = [tp for tp in result.topic_partitions if tp.error is not None]
    if failed:
        first = failed[0]
        raise CliError(
            f"the broker refused offsets of group {group!r} for "
            f"{partition_names((tp.topic, tp.partition) for tp in failed)}: {first.error.str()}"
        )
