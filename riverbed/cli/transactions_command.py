"""``riverbed transactions list|describe``, like kafka-transactions.sh.

confluent-kafka has no admin API for transactions, so both actions speak the Kafka protocol
themselves (``riverbed.client.TransactionAdmin``): ListTransactions to every broker, and
DescribeTransactions to each transactional id's coordinator. Versions are negotiated with
ApiVersions, so the tool works against a Kafka cluster too. The columns are Kafka's:

    list:      TransactionalId  Coordinator  ProducerId  TransactionState
    describe:  CoordinatorId  TransactionalId  ProducerId  ProducerEpoch  TransactionState
               TransactionTimeoutMs  CurrentTransactionStartTimeMs  TransactionDurationMs
               TopicPartitions

``-`` marks what there is none of (Kafka's tool prints ``None``, or nothing for no
partitions). As in ``riverbed groups``, notices go to stderr, so stdout holds only tables.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from riverbed.cli.arguments import (
    add_action,
    add_command_with_actions,
    add_state_filter,
    non_negative_int,
)
from riverbed.cli.confluent import REQUEST_TIMEOUT_S
from riverbed.cli.errors import CliError
from riverbed.cli.output import notice, print_table
from riverbed.client import ClientError, InvalidAddressError, UnsupportedFilterError

if TYPE_CHECKING:  # loaded where used: kio takes 0.15 s, and every riverbed command imports this
    from riverbed.client import TransactionAdmin, TransactionDescription

__all__ = ["STATES", "add_parser"]

PREFIX = "riverbed transactions"
# Kafka's transaction states (org.apache.kafka.coordinator.transaction.TransactionState).
STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
          "CompleteAbort", "Dead", "PrepareEpochFence")  # fmt: skip
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                    "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                    "TransactionDurationMs", "TopicPartitions")  # fmt: skip
# The flags of ``list`` by the ``ListFilters`` field they set.
FILTER_FLAGS = {"min_duration_ms": "--duration-ms", "pattern": "--pattern"}


def add_parser(commands: Any) -> None:
    actions = add_command_with_actions(
        commands,
        "transactions",
        "list and describe transactional producers' transactions (like kafka-transactions.sh)",
        "List and describe transactions through the Kafka protocol (ListTransactions, "
        "DescribeTransactions).",
    )

    listing = add_action(
        actions, "list", run_list, "list transactional ids with their producer and state"
    )
    add_state_filter(listing, _states, states=STATES, of="transactions")
    listing.add_argument(
        "--producer-id",
        action="append",
        default=[],
        type=non_negative_int,
        metavar="N",
        help="only transactions of this producer id (repeatable)",
    )
    listing.add_argument(
        "--duration-ms",
        "--duration-filter",
        type=non_negative_int,
        metavar="MS",
        help="only transactions open at least this long (needs ListTransactions v1)",
    )
    listing.add_argument(
        "--pattern",
        "--transactional-id-pattern",
        metavar="REGEX",
        help="only transactional ids this regular expression matches (needs ListTransactions v2)",
    )

    describe = add_action(
        actions, "describe", run_describe, "producer, state and partitions of transactional ids"
    )
    describe.add_argument("transactional_ids", nargs="*", metavar="TRANSACTIONAL_ID")
    describe.add_argument(
        "--transactional-id",
        dest="flag_ids",
        action="append",
        default=[],
        metavar="TRANSACTIONAL_ID",
        help="a transactional id, as kafka-transactions.sh spells it (repeatable)",
    )


def _states(text: str) -> list[str]:
    """Comma-separated state names; Kafka's are matched case-insensitively, others are
    passed on as given (the broker reports the ones it does not know)."""
    by_name = {name.lower(): name for name in STATES}
    names = filter(None, (part.strip() for part in text.split(",")))
    return [by_name.get(name.lower(), name) for name in names]


@contextlib.contextmanager
def _admin(args: argparse.Namespace) -> Iterator[TransactionAdmin]:
    """A ``TransactionAdmin`` for ``--bootstrap``, closed after; its errors become one line."""
    from riverbed.client import TransactionAdmin

    try:
        with TransactionAdmin(
            args.bootstrap,
            connect_timeout_s=args.connect_timeout_ms / 1000,
            request_timeout_s=REQUEST_TIMEOUT_S,
        ) as admin:
            yield admin
    except InvalidAddressError as e:
        raise CliError(f"--bootstrap: {e}", exit_code=2) from None
    except UnsupportedFilterError as e:
        raise CliError(f"{FILTER_FLAGS[e.filter_name]} {e.shortfall}") from None
    except ClientError as e:
        raise CliError(str(e)) from None


def run_list(args: argparse.Namespace) -> int:
    """ListTransactions on every broker: each transactional id, sorted."""
    from riverbed.client import ListFilters

    filters = ListFilters(
        states=list(dict.fromkeys(state for states in args.state for state in states)),
        producer_ids=list(dict.fromkeys(args.producer_id)),
        min_duration_ms=-1 if args.duration_ms is None else args.duration_ms,
        pattern=args.pattern,
    )
    with _admin(args) as admin:
        result = admin.list_transactions(filters)
    if result.unknown_states:
        notice(
            PREFIX,
            "the broker does not know the state(s) "
            + ", ".join(result.unknown_states)
            + " (known: "
            + ", ".join(STATES)
            + ")",
        )
    if result.listings:
        print_table(
            ("TransactionalId", "Coordinator", "ProducerId", "TransactionState"),
            (
                (t.transactional_id, t.coordinator_id, t.producer_id, t.state)
                for t in result.listings
            ),
        )
    return 0


def run_describe(args: argparse.Namespace) -> int:
    """DescribeTransactions at each id's coordinator; an id it does not know fails the run."""
    from kio.schema.errors import ErrorCode

    from riverbed.client import TransactionDescription, error_name

    transactional_ids = list(dict.fromkeys([*args.transactional_ids, *args.flag_ids]))
    if not transactional_ids:
        raise CliError("describe: name a transactional id", exit_code=2)
    with _admin(args) as admin:
        described = admin.describe_transactions(transactional_ids)
    now_ms = round(time.time() * 1000)
    rows = []
    status = 0
    for transactional_id, description in described.items():
        if isinstance(description, TransactionDescription):
            rows.append(_describe_row(description, now_ms=now_ms))
        elif description == ErrorCode.transactional_id_not_found:
            notice(PREFIX, f"transactional id {transactional_id!r} does not exist")
            status = 1
        else:
            notice(
                PREFIX,
                f"cannot describe transactional id {transactional_id!r}: {error_name(description)}",
            )
            status = 1
    if rows:
        print_table(DESCRIBE_HEADERS, rows)
    return status


def _describe_row(description: TransactionDescription, *, now_ms: int) -> list[object]:
    """Kafka's describe columns; the duration is measured with this machine's clock, as
    Kafka's tool does."""
    start = description.start_ms
    partitions = ",".join(f"{topic}-{partition}" for topic, partition in description.partitions)
    return [
        description.coordinator_id,
        description.transactional_id,
        description.producer_id,
        description.producer_epoch,
        description.state,
        description.timeout_ms,
        "-" if start is None else start,
        "-" if start is None else max(0, now_ms - start),
        partitions or "-",
    ]
