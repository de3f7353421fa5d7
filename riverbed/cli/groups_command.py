"""``riverbed groups list|describe|reset-offsets|delete``, like kafka-consumer-groups.sh.

Every action is a Kafka admin request sent with confluent-kafka's AdminClient (ListGroups,
DescribeGroups, OffsetFetch, ListOffsets, OffsetCommit, DeleteGroups), so the tool works the
same against a Kafka cluster. ``describe`` prints Kafka's columns, one row per partition:

    GROUP  TOPIC  PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  CONSUMER-ID  HOST  CLIENT-ID

where CURRENT-OFFSET is the group's committed offset, LOG-END-OFFSET the partition's high
watermark and LAG their difference; ``-`` marks what is unknown. As in Kafka's tool, notices
about a group ("has no active members", "is rebalancing") go to stderr, so stdout holds only
tables. ``reset-offsets`` plans with ``riverbed.cli.offset_reset`` and changes nothing
unless ``--execute`` is given; like Kafka's tool it refuses while the group has members,
whose own commits would overwrite the reset.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupType,
    KafkaError,
)

# confluent_kafka.admin ships type hints but re-exports these names without declaring them
# (no __all__), so mypy --strict does not count them as exported.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ClusterMetadata,
    OffsetSpec,
)

from riverbed.cli.arguments import (
    add_action,
    add_command_with_actions,
    add_state_filter,
    non_negative_int,
)
from riverbed.cli.confluent import (
    REQUEST_TIMEOUT_S,
    admin_error_code,
    admin_result,
    connect_admin,
)
from riverbed.cli.errors import CliError
from riverbed.cli.group_admin import (
    INACTIVE_STATES,
    STATE_NAMES,
    commit_offsets,
    committed_offsets,
    describe_groups,
    list_offsets,
    partition_names,
)
from riverbed.cli.offset_reset import (
    Bounds,
    Partition,
    ResetTarget,
    Strategy,
    TopicSpec,
    parse_datetime_ms,
    parse_topic_spec,
    plan_offsets,
)
from riverbed.cli.output import notice, print_table

__all__ = ["add_parser"]

OFFSET_HEADERS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                  "CONSUMER-ID", "HOST", "CLIENT-ID")  # fmt: skip
PREFIX = "riverbed groups"


def add_parser(commands: Any) -> None:
    actions = add_command_with_actions(
        commands,
        "groups",
        "list, describe, reset offsets of and delete consumer groups "
        "(like kafka-consumer-groups.sh)",
        "Manage consumer groups and their committed offsets through the Kafka admin API.",
    )

    listing = add_action(actions, "list", run_list, "list consumer groups with type and state")
    add_state_filter(listing, _states, states=STATE_NAMES.values(), of="groups")

    describe = add_action(
        actions, "describe", run_describe, "committed offsets, lag and members of groups"
    )
    _add_group_arguments(describe, many=True)
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true", help="one row per member instead")
    view.add_argument(
        "--state", action="store_true", help="coordinator, assignor, state and member count"
    )
    describe.add_argument(
        "--verbose", action="store_true", help="with --members: each member's partitions"
    )

    reset = add_action(actions, "reset-offsets", run_reset, "move a group's committed offsets")
    _add_group_arguments(reset, many=False)
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "--topic",
        action="append",
        type=parse_topic_spec,
        metavar="TOPIC[:P,P...]",
        help="a topic, or some of its partitions (repeatable)",
    )
    scope.add_argument(
        "--all-topics", action="store_true", help="every partition the group has committed"
    )
    target = reset.add_mutually_exclusive_group(required=True)
    for strategy, help_text in (
        (Strategy.EARLIEST, "each partition's first offset"),
        (Strategy.LATEST, "each partition's end (skip everything so far)"),
    ):
        target.add_argument(
            strategy.value,
            dest="target",
            action="store_const",
            const=ResetTarget(strategy=strategy),
            help=help_text,
        )
    valued: list[tuple[Strategy, str, Callable[[str], int], str]] = [
        (Strategy.OFFSET, "N", non_negative_int,
         "offset N (clamped to the partition's first and end offsets)"),
        (Strategy.DATETIME, "ISO8601", parse_datetime_ms,
         "the first record at or after this time, e.g. 2026-01-01T00:00:00Z or "
         "2026-01-01T01:00:00+01:00 (no zone: UTC); the end if there is none"),
        (Strategy.SHIFT, "N", _integer,
         "the committed offset plus N (N may be negative; clamped)"),
    ]  # fmt: skip
    for strategy, metavar, parse, help_text in valued:
        target.add_argument(
            strategy.value,
            dest="target",
            metavar=metavar,
            type=functools.partial(_target, strategy, parse),
            help=help_text,
        )
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only print the plan (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")

    delete = add_action(actions, "delete", run_delete, "delete groups and their committed offsets")
    _add_group_arguments(delete, many=True)


def _add_group_arguments(parser: argparse.ArgumentParser, *, many: bool) -> None:
    """GROUP as an argument, or Kafka's ``--group GROUP``; ``_groups`` checks one was given."""
    parser.add_argument("groups", nargs="*" if many else "?", metavar="GROUP")
    parser.add_argument(
        "--group",
        dest="flag_groups",
        action="append" if many else "store",
        metavar="GROUP",
        help="the group, as kafka-consumer-groups.sh spells it" + (" (repeatable)" if many else ""),
    )


def _groups(args: argparse.Namespace) -> list[str]:
    given = args.groups if isinstance(args.groups, list) else [args.groups]
    flagged = args.flag_groups if isinstance(args.flag_groups, list) else [args.flag_groups]
    groups = [g for g in [*given, *flagged] if g is not None]
    if not groups:
        raise CliError(f"{args.action}: name a consumer group", exit_code=2)
    if args.action == "reset-offsets" and len(groups) > 1:
        raise CliError("reset-offsets: name one consumer group", exit_code=2)
    return list(dict.fromkeys(groups))


def _target(strategy: Strategy, parse: Callable[[str], int], text: str) -> ResetTarget:
    return ResetTarget(strategy=strategy, value=parse(text))


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def _states(text: str) -> set[ConsumerGroupState]:
    by_name = {name.lower(): state for state, name in STATE_NAMES.items()}
    states = set()
    for name in filter(None, (part.strip() for part in text.split(","))):
        if name.lower() not in by_name:
            known = ", ".join(STATE_NAMES.values())
            raise argparse.ArgumentTypeError(f"unknown state {name!r} (known: {known})")
        states.add(by_name[name.lower()])
    return states


def _notice(message: str) -> None:
    notice(PREFIX, message)


def run_list(args: argparse.Namespace) -> int:
    """ListGroups: every group's id, type and state, sorted by id."""
    admin, _ = connect_admin(args)
    states: set[ConsumerGroupState] = set().union(*args.state)
    options: dict[str, Any] = {"request_timeout": REQUEST_TIMEOUT_S}
    if states:
        options["states"] = states
    result = admin_result(admin.list_consumer_groups(**options), "cannot list consumer groups")
    for error in result.errors:
        _notice(f"a broker did not list its groups: {error}")
    listings = sorted(result.valid, key=lambda listing: listing.group_id)
    if listings:
        print_table(
            ("GROUP", "TYPE", "STATE"),
            ((g.group_id, _type_name(g), STATE_NAMES.get(g.state, "Unknown")) for g in listings),
        )
    return 1 if result.errors else 0


def _type_name(listing: Any) -> str:
    """Classic or Consumer (KIP-848), as Kafka 4's tool says; Simple: offsets, no members."""
    if listing.is_simple_consumer_group:
        return "Simple"
    # A broker without ListGroups v5 does not say; such brokers only know classic groups.
    return "Consumer" if listing.type == ConsumerGroupType.CONSUMER else "Classic"


def run_describe(args: argparse.Namespace) -> int:
    """DescribeGroups (+ OffsetFetch and ListOffsets for the offsets view) per group."""
    groups = _groups(args)
    admin, _ = connect_admin(args)
    status = 0
    printed = False
    for group, description in describe_groups(admin, groups).items():
        if description is None:
            _notice(f"consumer group {group!r} does not exist")
            status = 1
            continue
        if not args.state:
            if not description.members:
                _notice(f"consumer group {group!r} has no active members")
            elif description.state != ConsumerGroupState.STABLE:
                _notice(f"consumer group {group!r} is rebalancing")
        if args.state:
            rows = [_state_row(group, description)]
            headers: Sequence[str] = ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY",
                                      "STATE", "#MEMBERS")  # fmt: skip
        elif args.members:
            rows = [_member_row(group, m, verbose=args.verbose) for m in description.members]
            headers = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
            headers = (*headers, "ASSIGNMENT") if args.verbose else headers
        else:
            rows = _offset_rows(admin, group, description)
            headers = OFFSET_HEADERS
        if rows:
            if printed:
                print()
            print_table(headers, rows)
            printed = True
    return status


def _state_row(group: str, description: Any) -> list[object]:
    node = description.coordinator
    coordinator = f"{node.host}:{node.port} ({node.id})" if node is not None else "-"
    return [group, coordinator, description.partition_assignor or "-",
            STATE_NAMES.get(description.state, "Unknown"), len(description.members)]  # fmt: skip


def _assigned(member: Any) -> list[Partition]:
    assignment = member.assignment.topic_partitions if member.assignment else []
    return sorted((tp.topic, tp.partition) for tp in assignment or [])


def _member_row(group: str, member: Any, *, verbose: bool) -> list[object]:
    assigned = _assigned(member)
    row: list[object] = [group, *_who(member), len(assigned)]
    if verbose:
        by_topic: dict[str, list[str]] = {}
        for topic, partition in assigned:
            by_topic.setdefault(topic, []).append(str(partition))
        row.append(",".join(f"{t}({','.join(ps)})" for t, ps in by_topic.items()) or "-")
    return row


def _offset_rows(admin: AdminClient, group: str, description: Any) -> list[list[object]]:
    """Kafka's describe rows: assigned partitions, then committed ones no member has."""
    committed = committed_offsets(admin, group)
    owner = {tp: m for m in description.members for tp in _assigned(m)}
    partitions = sorted(set(committed) | set(owner))
    # OffsetSpec's factories have no type hints (confluent-kafka 2.16).
    log_end = list_offsets(admin, partitions, OffsetSpec.latest())  # type: ignore[no-untyped-call]
    rows: list[list[object]] = []
    for tp in partitions:
        current, end = committed.get(tp), log_end.get(tp)
        lag = end - current if current is not None and end is not None else "-"
        member = owner.get(tp)
        who = _who(member) if member else ["-", "-", "-"]
        rows.append([group, tp[0], tp[1], _dash(current), _dash(end), lag, *who])
    for member in description.members:
        if not _assigned(member):
            rows.append([group, "-", "-", "-", "-", "-", *_who(member)])
    return rows


def _who(member: Any) -> list[str]:
    """CONSUMER-ID, HOST, CLIENT-ID; ``-`` for one the broker left empty (KIP-848 hosts)."""
    return [member.member_id or "-", member.host or "-", member.client_id or "-"]


def _dash(value: int | None) -> object:
    return "-" if value is None else value


def run_reset(args: argparse.Namespace) -> int:
    """Plan new offsets from ListOffsets (and OffsetFetch); with --execute, OffsetCommit them."""
    (group,) = _groups(args)
    admin, metadata = connect_admin(args)
    description = describe_groups(admin, [group])[group]
    if description is not None and (
        description.members or description.state not in INACTIVE_STATES
    ):
        state = STATE_NAMES.get(description.state, "Unknown")
        raise CliError(
            f"cannot reset the offsets of group {group!r} while it has active members "
            f"(state {state}); stop its consumers first"
        )
    committed = committed_offsets(admin, group)
    partitions = _partitions_to_reset(args, group, metadata, committed)
    # OffsetSpec's factories have no type hints (confluent-kafka 2.16).
    earliest = list_offsets(admin, partitions, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
    latest = list_offsets(admin, partitions, OffsetSpec.latest())  # type: ignore[no-untyped-call]
    missing = [tp for tp in partitions if tp not in earliest or tp not in latest]
    if missing:
        raise CliError(f"cannot look up the offsets of {partition_names(missing)}")
    bounds = {tp: Bounds(earliest=earliest[tp], latest=latest[tp]) for tp in partitions}
    by_time = None
    if args.target.strategy == Strategy.DATETIME:
        by_time = list_offsets(admin, partitions, OffsetSpec.for_timestamp(args.target.value))
    plan = plan_offsets(
        args.target, partitions, committed=committed, bounds=bounds, by_time=by_time
    )
    if args.execute:
        commit_offsets(admin, group, plan)
    print_table(
        ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
        ([group, topic, partition, offset] for (topic, partition), offset in plan.items()),
    )
    if not args.execute and not args.dry_run:
        _notice("dry run, nothing changed; add --execute to commit these offsets")
    return 0


def _partitions_to_reset(
    args: argparse.Namespace,
    group: str,
    metadata: ClusterMetadata,
    committed: dict[Partition, int],
) -> list[Partition]:
    if args.all_topics:
        if not committed:
            raise CliError(
                f"group {group!r} has no committed offsets; name the partitions with --topic"
            )
        return sorted(committed)
    chosen: set[Partition] = set()
    spec: TopicSpec
    for spec in args.topic:
        topic = metadata.topics.get(spec.topic)
        if topic is None or topic.error is not None:
            raise CliError(f"topic {spec.topic!r} does not exist")
        existing = set(topic.partitions)
        wanted = existing if spec.partitions is None else set(spec.partitions)
        if wanted - existing:
            absent = ",".join(str(p) for p in sorted(wanted - existing))
            raise CliError(f"topic {spec.topic!r} has no partition {absent}")
        chosen |= {(spec.topic, p) for p in wanted}
    return sorted(chosen)


def run_delete(args: argparse.Namespace) -> int:
    """DeleteGroups; a group with members (NON_EMPTY_GROUP) or none at all fails the run."""
    groups = _groups(args)
    admin, _ = connect_admin(args)
    futures = admin.delete_consumer_groups(groups, request_timeout=REQUEST_TIMEOUT_S)
    deleted = []
    for group in groups:
        code = admin_error_code(futures[group])
        if code is None:
            deleted.append(group)
        elif code == KafkaError.GROUP_ID_NOT_FOUND:
            _notice(f"consumer group {group!r} does not exist")
        elif code == KafkaError.NON_EMPTY_GROUP:
            _notice(
                f"cannot delete consumer group {group!r}: it has active members (NON_EMPTY_GROUP)"
            )
        else:
            try:
                admin_result(futures[group], f"cannot delete consumer group {group!r}")
            except CliError as e:
                _notice(str(e))
    if deleted:
        names = ", ".join(f"'{group}'" for group in deleted)
        print(f"Deletion of requested consumer groups ({names}) was successful.")
    return 0 if len(deleted) == len(groups) else 1
