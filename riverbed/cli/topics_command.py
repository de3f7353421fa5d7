"""``riverbed topics create|list|describe|delete|alter|delete-records``: manage topics, like
kafka-topics.sh, kafka-configs.sh and kafka-delete-records.sh.

Every action is a Kafka admin request (CreateTopics, Metadata, DescribeConfigs,
DeleteTopics, CreatePartitions, IncrementalAlterConfigs, DeleteRecords) sent with
confluent-kafka's AdminClient, so the tool works the same against a Kafka cluster.
``describe`` prints Kafka's layout:

    Topic: T  TopicId: ...  PartitionCount: 3  ReplicationFactor: 1  Configs: k=v
        Topic: T  Partition: 0  Leader: 1  Replicas: 1  Isr: 1

(tab-separated), listing only the configs set on the topic itself; with ``--all-configs``
every config follows, one ``name=value (SOURCE)`` line each, SOURCE being Kafka's
(DYNAMIC_TOPIC_CONFIG for the topic's own, STATIC_BROKER_CONFIG, DEFAULT_CONFIG).

``alter`` grows the partitions (``--partitions``) and changes the topic's configs
(``--add-config``, ``--delete-config``): both are validated by the broker first
(``validate_only``), so a bad value changes nothing. ``delete-records`` deletes every record
before an offset (kafka-delete-records.sh): the partition's earliest offset moves there.
"""

from __future__ import annotations

import argparse
from typing import Any

from confluent_kafka import KafkaError, TopicCollection, TopicPartition

# confluent_kafka.admin ships type hints but re-exports these names without declaring them
# (no __all__), so mypy --strict does not count them as exported.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from riverbed.cli.arguments import (
    add_action,
    add_assignments,
    add_command_with_actions,
    non_negative_int,
    parse_assignments,
    positive_int,
)
from riverbed.cli.confluent import (
    REQUEST_TIMEOUT_S,
    admin_error_code,
    admin_result,
    connect_admin,
)
from riverbed.cli.errors import CliError

__all__ = ["add_parser"]

# CreateTopics' "use the broker's default" for partitions and replication factor (KIP-464).
BROKER_DEFAULT = -1


def add_parser(commands: Any) -> None:
    actions = add_command_with_actions(
        commands,
        "topics",
        "create, list, describe, alter and delete topics (like kafka-topics.sh)",
        "Manage topics through the Kafka admin API.",
    )

    create = add_action(actions, "create", run_create, "create a topic")
    create.add_argument("--topic", required=True)
    create.add_argument(
        "--partitions", type=positive_int, help="number of partitions (default: the broker's)"
    )
    create.add_argument(
        "--replication-factor", type=positive_int, help="replicas (default: the broker's)"
    )
    add_assignments(
        create, "--config", "a topic config such as cleanup.policy=compact (repeatable)"
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
    describe.add_argument(
        "--all-configs",
        action="store_true",
        help="list every config with its source, not only the topic's own",
    )

    delete = add_action(actions, "delete", run_delete, "delete a topic")
    delete.add_argument("--topic", required=True)
    delete.add_argument("--if-exists", action="store_true", help="succeed if there is no topic")

    alter = add_action(
        actions, "alter", run_alter, "add partitions to a topic or change its configs"
    )
    alter.add_argument("--topic", required=True)
    alter.add_argument("--partitions", type=positive_int, help="the new, larger partition count")
    add_assignments(
        alter, "--add-config", "set a topic config, such as retention.ms=86400000 (repeatable)"
    )
    add_assignments(
        alter,
        "--delete-config",
        "remove a topic config: it falls back to the broker's default (repeatable)",
        metavar="KEY[,KEY...]",
    )

    trim = add_action(
        actions,
        "delete-records",
        run_delete_records,
        "delete the records before an offset (like kafka-delete-records.sh)",
    )
    trim.add_argument("--topic", required=True)
    trim.add_argument(
        "--partition", type=non_negative_int, help="the partition (default: every partition)"
    )
    trim.add_argument(
        "--offset",
        type=_offset,
        required=True,
        help="delete every record before this offset; -1 deletes all (up to the high watermark)",
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
    future = admin.create_topics([topic], request_timeout=REQUEST_TIMEOUT_S)[args.topic]
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
    descriptions = admin.describe_topics(TopicCollection(names), request_timeout=REQUEST_TIMEOUT_S)
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
    config_futures = admin.describe_configs(resources, request_timeout=REQUEST_TIMEOUT_S)
    configs_by_topic = {resource.name: future for resource, future in config_futures.items()}
    for name in names:
        future = descriptions[name]
        future.exception()
        if admin_error_code(future) == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise CliError(f"topic {name!r} does not exist")
        description = admin_result(future, f"cannot describe topic {name!r}")
        entries = admin_result(configs_by_topic[name], f"cannot describe configs of topic {name!r}")
        _print_description(description, _overridden(entries))
        if args.all_configs:
            for line in _all_configs(entries):
                print(f"\t{line}")
    return 0


def _source(entry: Any) -> int:
    return int(getattr(entry.source, "value", entry.source))  # an enum or a plain int


def _all_configs(entries: dict[str, Any]) -> list[str]:
    """``name=value (SOURCE)`` for every config, as kafka-configs.sh --describe --all."""
    lines = []
    for name in sorted(entries):
        entry = entries[name]
        value = "<sensitive>" if entry.is_sensitive else entry.value
        try:
            source = ConfigSource(_source(entry)).name
        except ValueError:
            source = "UNKNOWN_CONFIG"
        lines.append(f"{name}={value} ({source})")
    return lines


def _overridden(entries: dict[str, Any]) -> list[str]:
    """``k=v`` for each config set on the topic itself, as kafka-topics.sh shows them."""
    result = []
    for name in sorted(entries):
        entry = entries[name]
        if _source(entry) != ConfigSource.DYNAMIC_TOPIC_CONFIG.value:
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
    future = admin.delete_topics([args.topic], request_timeout=REQUEST_TIMEOUT_S)[args.topic]
    future.exception()
    if admin_error_code(future) == KafkaError.UNKNOWN_TOPIC_OR_PART:
        if args.if_exists:
            return 0
        raise CliError(f"topic {args.topic!r} does not exist")
    admin_result(future, f"cannot delete topic {args.topic!r}")
    print(f"Deleted topic {args.topic}.")
    return 0


def run_alter(args: argparse.Namespace) -> int:
    """CreatePartitions (grow to --partitions; Kafka cannot shrink a topic) and
    IncrementalAlterConfigs (--add-config, --delete-config), each validated first."""
    configs = _config_changes(args)
    if args.partitions is None and not configs:
        raise CliError("alter needs --partitions, --add-config or --delete-config", exit_code=2)
    admin, metadata = connect_admin(args)
    if args.topic not in metadata.topics:
        raise CliError(f"topic {args.topic!r} does not exist")
    for validate_only in (True, False):
        if args.partitions is not None:
            _grow(admin, args.topic, args.partitions, validate_only=validate_only)
        if configs:
            _alter_configs(admin, args.topic, configs, validate_only=validate_only)
    if args.partitions is not None:
        print(f"Topic {args.topic} now has {args.partitions} partitions.")
    if configs:
        print(f"Updated the configs of topic {args.topic}.")
    return 0


def _config_changes(args: argparse.Namespace) -> list[ConfigEntry]:
    """--add-config as SETs and --delete-config as DELETEs (a key in both is a usage error)."""
    added = parse_assignments(args.add_config, flag="--add-config")
    deleted = [key.strip() for item in args.delete_config for key in item.split(",")]
    if any(not key for key in deleted):
        raise CliError("--delete-config expects config names, got an empty one", exit_code=2)
    both = sorted(set(added) & set(deleted))
    if both:
        raise CliError(f"{both[0]!r} is both added and deleted", exit_code=2)
    return [
        *(ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in added.items()),
        *(ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in deleted),
    ]


def _grow(admin: Any, topic: str, total: int, *, validate_only: bool) -> None:
    request = NewPartitions(topic, total)
    future = admin.create_partitions(
        [request], request_timeout=REQUEST_TIMEOUT_S, validate_only=validate_only
    )[topic]
    admin_result(future, f"cannot change the partitions of topic {topic!r}")


def _alter_configs(
    admin: Any, topic: str, configs: list[ConfigEntry], *, validate_only: bool
) -> None:
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=configs)
    future = admin.incremental_alter_configs(
        [resource], request_timeout=REQUEST_TIMEOUT_S, validate_only=validate_only
    )[resource]
    admin_result(future, f"cannot change the configs of topic {topic!r}")


def _offset(text: str) -> int:
    """argparse ``type=`` for --offset: an offset, or -1 for the high watermark."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < -1:
        raise argparse.ArgumentTypeError(f"must be an offset or -1: {text!r}")
    return value


def run_delete_records(args: argparse.Namespace) -> int:
    """DeleteRecords: each partition's earliest offset moves up to --offset."""
    admin, metadata = connect_admin(args)
    topic = metadata.topics.get(args.topic)
    if topic is None:
        raise CliError(f"topic {args.topic!r} does not exist")
    partitions = sorted(topic.partitions) if args.partition is None else [args.partition]
    if args.partition is not None and args.partition not in topic.partitions:
        raise CliError(
            f"topic {args.topic!r} has no partition {args.partition} "
            f"(it has {len(topic.partitions)})"
        )
    requests = [TopicPartition(args.topic, p, args.offset) for p in partitions]
    futures = admin.delete_records(requests, request_timeout=REQUEST_TIMEOUT_S)
    lines = []
    for request, future in sorted(futures.items(), key=lambda item: item[0].partition):
        name = f"{request.topic}-{request.partition}"
        deleted = admin_result(future, f"cannot delete the records of {name}")
        lines.append(f"partition: {name}\tlow_watermark: {deleted.low_watermark}")
    print("Records delete operation completed:")
    print("\n".join(lines))
    return 0
