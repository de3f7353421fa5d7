"""``riverbed topics create|list|describe|delete|alter``: manage topics, like kafka-topics.sh.

Every action is one Kafka admin request (CreateTopics, Metadata, DescribeConfigs,
DeleteTopics, CreatePartitions) sent with confluent-kafka's AdminClient, so the tool works
the same against a Kafka cluster. ``describe`` prints Kafka's layout:

    Topic: T  TopicId: ...  PartitionCount: 3  ReplicationFactor: 1  Configs: k=v
        Topic: T  Partition: 0  Leader: 1  Replicas: 1  Isr: 1

(tab-separated), listing only the configs set on the topic itself.
"""

from __future__ import annotations

import argparse
from typing import Any

from confluent_kafka import KafkaError, TopicCollection
from confluent_kafka.admin import (
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from riverbed.cli.client import (
    ADMIN_REQUEST_TIMEOUT_S,
    add_action,
    admin_error_code,
    admin_result,
    connect_admin,
    parse_assignments,
    positive_int,
)
from riverbed.cli.errors import CliError

__all__ = ["add_parser"]

# CreateTopics' "use the broker's default" for partitions and replication factor (KIP-464).
BROKER_DEFAULT = -1


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "topics",
        help="create, list, describe, alter and delete topics (like kafka-topics.sh)",
        description="Manage topics through the Kafka admin API.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = add_action(actions, "create", run_create, "create a topic")
    create.add_argument("--topic", required=True)
    create.add_argument(
        "--partitions", type=positive_int, help="number of partitions (default: the broker's)"
    )
    create.add_argument(
        "--replication-factor", type=positive_int, help="replicas (default: the broker's)"
    )
    create.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic config such as cleanup.policy=compact (repeatable)",
    )
    create.add_argument(
        "--if-not-exists", action="store_true", help="succeed if the topic already exists"
    )

    listing = add_action(actions, "list", run_list, "list topic names, one per line")
    listing.add_argument(
        "--exclude-internal", action="store_true", help="leave out topics starting with __"
    )

    describe = add_action(actions, "describe", run_describe, "partitions, leaders and configs")
    describe.add_argument("--topic", help="the topic to describe (default: all topics)")

    delete = add_action(actions, "delete", run_delete, "delete a topic")
    delete.add_argument("--topic", required=True)
    delete.add_argument("--if-exists", action="store_true", help="succeed if there is no topic")

    alter = add_action(actions, "alter", run_alter, "add partitions to a topic")
    alter.add_argument("--topic", required=True)
    alter.add_argument(
        "--partitions", type=positive_int, required=True, help="the new, larger partition count"
    )


def run_create(args: argparse.Namespace) -> int:
    """CreateTopics; exit 1 if the topic exists, unless --if-not-exists."""
    configs = parse_assignments(args.config, flag="--config")
    admin, _ = connect_admin(args)
    topic = NewTopic(
        args.topic,
        num_partitions=args.partitions or BROKER_DEFAULT,
        replication_factor=args.replication_factor or BROKER_DEFAULT,
        config=configs,
    )
    future = admin.create_topics([topic], request_timeout=ADMIN_REQUEST_TIMEOUT_S)[args.topic]
    future.exception()  # wait
    if args.if_not_exists and admin_error_code(future) == KafkaError.TOPIC_ALREADY_EXISTS:
        return 0
    admin_result(future, f"cannot create topic {args.topic!r}")
    print(f"Created topic {args.topic}.")
    return 0


def run_list(args: argparse.Namespace) -> int:
    """Metadata for all topics: their names, sorted."""
    _, metadata = connect_admin(args)
    for name in sorted(metadata.topics):
        if args.exclude_internal and name.startswith("__"):
            continue
        print(name)
    return 0


def run_describe(args: argparse.Namespace) -> int:
    """Metadata (with topic IDs) and DescribeConfigs for one topic or all of them."""
    admin, metadata = connect_admin(args)
    names = sorted(metadata.topics) if args.topic is None else [args.topic]
    if not names:
        return 0
    descriptions = admin.describe_topics(
        TopicCollection(names), request_timeout=ADMIN_REQUEST_TIMEOUT_S
    )
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
    config_futures = admin.describe_configs(resources, request_timeout=ADMIN_REQUEST_TIMEOUT_S)
    configs_by_topic = {resource.name: future for resource, future in config_futures.items()}
    for name in names:
        future = descriptions[name]
        future.exception()
        if admin_error_code(future) == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise CliError(f"topic {name!r} does not exist")
        description = admin_result(future, f"cannot describe topic {name!r}")
        entries = admin_result(configs_by_topic[name], f"cannot describe configs of topic {name!r}")
        _print_description(description, _overridden(entries))
    return 0


def _overridden(entries: dict[str, Any]) -> list[str]:
    """``k=v`` for each config set on the topic itself, as kafka-topics.sh shows them."""
    result = []
    for name in sorted(entries):
        entry = entries[name]
        source = getattr(entry.source, "value", entry.source)  # an enum or a plain int
        if source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value:
            continue
        value = "<sensitive>" if entry.is_sensitive else entry.value
        result.append(f"{name}={value}")
    return result


def _print_description(description: Any, configs: list[str]) -> None:
    partitions = sorted(description.partitions, key=lambda p: p.id)
    replication_factor = len(partitions[0].replicas) if partitions else 0
    print(
        f"Topic: {description.name}\tTopicId: {description.topic_id}\t"
        f"PartitionCount: {len(partitions)}\tReplicationFactor: {replication_factor}\t"
        f"Configs: {','.join(configs)}"
    )
    for partition in partitions:
        leader = partition.leader.id if partition.leader is not None else "none"
        replicas = ",".join(str(node.id) for node in partition.replicas)
        isr = ",".join(str(node.id) for node in partition.isr)
        print(
            f"\tTopic: {description.name}\tPartition: {partition.id}\tLeader: {leader}\t"
            f"Replicas: {replicas}\tIsr: {isr}"
        )


def run_delete(args: argparse.Namespace) -> int:
    """DeleteTopics; exit 1 if there is no such topic, unless --if-exists."""
    admin, _ = connect_admin(args)
    future = admin.delete_topics([args.topic], request_timeout=ADMIN_REQUEST_TIMEOUT_S)[args.topic]
    future.exception()
    if admin_error_code(future) == KafkaError.UNKNOWN_TOPIC_OR_PART:
        if args.if_exists:
            return 0
        raise CliError(f"topic {args.topic!r} does not exist")
    admin_result(future, f"cannot delete topic {args.topic!r}")
    print(f"Deleted topic {args.topic}.")
    return 0


def run_alter(args: argparse.Namespace) -> int:
    """CreatePartitions: grow the topic to --partitions (Kafka cannot shrink a topic)."""
    admin, _ = connect_admin(args)
    request = NewPartitions(args.topic, args.partitions)
    future = admin.create_partitions([request], request_timeout=ADMIN_REQUEST_TIMEOUT_S)[args.topic]
    future.exception()
    if admin_error_code(future) == KafkaError.UNKNOWN_TOPIC_OR_PART:
        raise CliError(f"topic {args.topic!r} does not exist")
    admin_result(future, f"cannot change the partitions of topic {args.topic!r}")
    print(f"Topic {args.topic} now has {args.partitions} partitions.")
    return 0
